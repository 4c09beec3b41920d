"""SFTP servers other than the test suite's plain OpenSSH, for interoperability runs.

Each class starts one real server on 127.0.0.1 (a free port) with generated keys,
logging the test user (`attest`, see tests/support/sshd.py) in by public key only:

    rclone       `rclone serve sftp DIR` (default VFS: no cache), run as the login user
    asyncssh     an SFTP-only asyncssh server (tests/support/asyncssh_sftpd.py), "/" mapped to DIR
    proftpd      ProFTPD's mod_sftp, its own config in the server's directory
    dropbear     dropbear with OpenSSH's sftp-server as its SFTP subsystem
    forcecommand OpenSSH sshd, `ForceCommand internal-sftp` + `ChrootDirectory` (HPC login nodes)
    openssh      OpenSSH sshd, plain (tests/support/sshd.py's SSHServer)

Every server offers the same surface, so a harness treats them alike:

    server = make_server("rclone", base).start()
    server.url("dst")        # sftp://attest@127.0.0.1:PORT/<path as the server sees it>/dst
    server.local("dst")      # the directory on this machine that path is stored in
    server.cli_args()        # --identity KEY --known-hosts FILE for airflow-transfer
    server.make_dir("dst")   # an empty directory there, owned by the login user
    server.stop()            # every process it started, and the sessions they serve
    server.cleanup()         # its files (the base directory, and a chroot outside it)

`probe(server)` asks the server what it is: its SFTP version reply (extensions),
whether it runs commands (exec), how much one READ returns, and whether it takes
writes at an offset before the bytes ahead of it were written.

Servers need root (sshd's chroot and user switch, ProFTPD, dropbear) and the packages
scripts/install-interop-deps.sh installs.
"""

from __future__ import annotations

import fcntl
import os
import posixpath
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.support.sshd import (
    SSHServer,
    _keygen,
    _pids_holding,
    _server_socket_inodes,
    chown_to_user,
    free_port,
    login_user,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVERS = ("rclone", "asyncssh", "proftpd", "dropbear", "forcecommand", "openssh")
# sshd refuses a ChrootDirectory with any path component writable by others than root
# (/tmp is), so chroots live under this root-owned directory instead.
CHROOT_PARENT = Path("/srv/airflow-transfer-interop")
SFTP_SERVER = next(
    (
        p
        for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/libexec/sftp-server")
        if os.path.exists(p)
    ),
    "/usr/lib/openssh/sftp-server",
)


class ServerUnavailable(RuntimeError):
    """This server cannot run on this machine (missing package, not root); the message says why."""


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ServerUnavailable(f"{what} needs root (run as root; make interop does)")


def _need_exe(path: str, package: str) -> str:
    found = shutil.which(path) or (path if os.path.isabs(path) and os.access(path, os.X_OK) else None)
    if not found:
        raise ServerUnavailable(f"{path} is missing: install {package} (bash scripts/install-interop-deps.sh)")
    return found


def _kill_port_users(port: int, timeout: float = 5.0) -> None:
    """SIGKILL whatever still holds a server-side socket on `port` (forked sessions)."""
    deadline = time.monotonic() + timeout
    while True:
        inodes = _server_socket_inodes(port)
        holders = _pids_holding(inodes) if inodes else set()
        if not holders or time.monotonic() > deadline:
            return
        for pid in holders:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _chown_file(path: Path, user: str) -> None:
    if os.geteuid() == 0:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _ssh_banner(host: str, port: int) -> bytes:
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.settimeout(2.0)
            return s.recv(64)
    except OSError:
        return b""


class InteropServer:
    """What every server here offers; subclasses set `data`/`root` and implement `_launch`."""

    name = ""
    key_type = "ed25519"  # the client key's type

    def __init__(self, base: Path, host: str = "127.0.0.1", user: str | None = None) -> None:
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        self.host = host
        self.port = free_port(host)
        self.user = user or login_user()
        self.client_key = self.base / f"id_{self.key_type}"
        self.known_hosts = self.base / "known_hosts"
        self.log_file = self.base / f"{self.name}.log"
        self.data = self.base / "data"  # the directory behind `root`
        self.root = str(self.data)  # how the server names `data`
        self.proc: subprocess.Popen | None = None
        self.version = ""

    # -- the surface a harness uses ---------------------------------------------------
    def url(self, path: str = "") -> str:
        p = posixpath.join(self.root, path) if path else self.root
        if not p.startswith("/"):
            p = "/" + p
        return f"sftp://{self.user}@{self.host}:{self.port}{p}"

    def remote_path(self, path: str = "") -> str:
        """`path` (relative to the data directory) as the server names it."""
        p = posixpath.join(self.root, path) if path else self.root
        return p if p.startswith("/") else "/" + p

    def local(self, path: str = "") -> Path:
        return self.data / path if path else self.data

    def cli_args(self) -> list[str]:
        return ["--identity", str(self.client_key), "--known-hosts", str(self.known_hosts)]

    def make_dir(self, path: str) -> Path:
        """An empty directory `path` under the data directory, owned by the login user."""
        d = self.local(path)
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        chown_to_user(d, self.user)
        return d

    def start(self, timeout: float = 20.0) -> InteropServer:
        self.data.mkdir(parents=True, exist_ok=True)
        chown_to_user(self.data, self.user)
        if not self.client_key.exists():
            _keygen(self.client_key, self.key_type)
        self._launch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log_text()[-1500:]}")
            banner = _ssh_banner(self.host, self.port)
            if banner.startswith(b"SSH-"):
                self.version = self.version or banner.split(b"\r\n")[0].decode(errors="replace")
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"{self.name} did not answer on {self.host}:{self.port} within {timeout}s: {self.log_text()[-1500:]}"
        )

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
        _kill_port_users(self.port)

    def cleanup(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> InteropServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.cleanup()

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    # -- helpers for subclasses -----------------------------------------------------------
    def _spawn(self, argv: list[str], env: dict | None = None, stdout=None) -> subprocess.Popen:
        log = open(self.log_file, "ab")
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout or log,
                stderr=log,
                env=env,
                start_new_session=True,
                cwd=str(self.base),
            )
        finally:
            log.close()
        return self.proc

    def _host_key(self) -> Path:
        """The server's host key (made once), and a known_hosts file that trusts it."""
        host_key = self.base / "host_key"
        if not host_key.exists():
            _keygen(host_key)
        self._write_known_hosts(Path(f"{host_key}.pub").read_text())
        return host_key

    def _authorized_keys(self) -> Path:
        authorized = self.base / "authorized_keys"
        authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        return authorized

    def _write_known_hosts(self, public_key_line: str) -> None:
        kind, blob = public_key_line.split()[:2]
        self.known_hosts.write_text(f"[{self.host}]:{self.port} {kind} {blob}\n")

    def _launch(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


# -- 1. rclone serve sftp -------------------------------------------------------------------
class RcloneServer(InteropServer):
    """`rclone serve sftp DIR`, default VFS (no cache: writes must arrive in order), as the login user."""

    name = "rclone"

    def __init__(self, base: Path, **kw) -> None:
        super().__init__(base, **kw)
        self.root = "/"  # rclone serves DIR as the root of the SFTP namespace

    def _launch(self) -> None:
        exe = _need_exe("rclone", "rclone")
        host_key = self._host_key()
        authorized = self._authorized_keys()
        conf = self.base / "rclone.conf"
        conf.touch()
        for p in (host_key, authorized, conf):
            _chown_file(p, self.user)
        self.version = subprocess.run([exe, "version"], capture_output=True, text=True).stdout.split("\n")[0]
        argv = [
            exe,
            "serve",
            "sftp",
            str(self.data),
            "--addr",
            f"{self.host}:{self.port}",
            "--key",
            str(host_key),
            "--authorized-keys",
            str(authorized),
            "--user",
            self.user,
            "--config",
            str(conf),
            "--log-level",
            "INFO",
        ]
        home = pwd.getpwnam(self.user).pw_dir
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "RCLONE_CONFIG": str(conf)}
        if os.geteuid() == 0 and self.user != "root":
            argv = ["runuser", "-u", self.user, "--", *argv]
        self._spawn(argv, env=env)


# -- 2. asyncssh ------------------------------------------------------------------------------
class AsyncsshServer(InteropServer):
    """asyncssh's SFTP server: sftp subsystem only (exec refused), "/" mapped to the data directory."""

    name = "asyncssh"

    def __init__(self, base: Path, **kw) -> None:
        super().__init__(base, **kw)
        self.root = "/"

    def _launch(self) -> None:
        try:
            import asyncssh
        except ImportError as exc:
            raise ServerUnavailable(
                "asyncssh is not installed in .venv (bash scripts/install-interop-deps.sh)"
            ) from exc
        self.version = f"asyncssh {asyncssh.__version__}"
        host_key = self._host_key()
        authorized = self._authorized_keys()
        argv = [
            sys.executable,
            "-m",
            "tests.support.asyncssh_sftpd",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--host-key",
            str(host_key),
            "--authorized-keys",
            str(authorized),
            "--root",
            str(self.data),
            "--user",
            self.user,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
                cwd=str(REPO_ROOT),
                text=True,
            )
        self.proc = proc
        line = proc.stdout.readline()
        if "READY" not in line:
            self.stop()
            raise RuntimeError(f"asyncssh server did not start: {line!r} {self.log_text()[-1500:]}")


# -- 3. ProFTPD mod_sftp ---------------------------------------------------------------------------
class ProftpdServer(InteropServer):
    """ProFTPD with mod_sftp only (no FTP), its own config file, key logins of the test user."""

    name = "proftpd"

    def _launch(self) -> None:
        _need_root("ProFTPD")
        exe = _need_exe("/usr/sbin/proftpd", "proftpd-core")
        if not Path("/usr/lib/proftpd/mod_sftp.so").exists():
            raise ServerUnavailable("/usr/lib/proftpd/mod_sftp.so is missing: install proftpd-mod-crypto")
        self.version = subprocess.run([exe, "-v"], capture_output=True, text=True).stdout.strip()
        host_key = self._host_key()
        # mod_sftp reads authorized keys in RFC 4716 form.
        authorized = self.base / "authorized_keys.rfc4716"
        authorized.write_text(
            subprocess.run(
                ["ssh-keygen", "-e", "-f", f"{self.client_key}.pub"], capture_output=True, text=True, check=True
            ).stdout
        )
        os.chmod(authorized, 0o644)
        conf = self.base / "proftpd.conf"
        conf.write_text(
            "\n".join(
                [
                    'ServerName "airflow-transfer interop"',
                    "ServerType standalone",
                    "DefaultServer on",
                    "UseIPv6 off",
                    f"DefaultAddress {self.host}",
                    "SocketBindTight on",
                    f"Port {self.port}",
                    "User nobody",
                    "Group nogroup",
                    "Umask 022",
                    f"PidFile {self.base / 'proftpd.pid'}",
                    f"ScoreboardFile {self.base / 'proftpd.scoreboard'}",
                    f"SystemLog {self.base / 'proftpd-system.log'}",
                    "WtmpLog off",
                    "UseReverseDNS off",
                    "MaxInstances 200",
                    "RequireValidShell off",
                    "AuthOrder mod_auth_unix.c",
                    "AllowOverwrite on",
                    "AllowStoreRestart on",
                    "<IfModule mod_delay.c>",
                    "  DelayEngine off",
                    "</IfModule>",
                    "ModulePath /usr/lib/proftpd",
                    "LoadModule mod_sftp.c",
                    "SFTPEngine on",
                    f"SFTPLog {self.base / 'sftp.log'}",
                    f"SFTPHostKey {host_key}",
                    f"SFTPAuthorizedUserKeys file:{authorized}",
                    "SFTPAuthMethods publickey",
                    "SFTPCompression off",
                    "<Limit LOGIN>",
                    f"  AllowUser {self.user}",
                    "  DenyAll",
                    "</Limit>",
                    "",
                ]
            )
        )
        check = subprocess.run([exe, "-t", "-c", str(conf)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"proftpd rejects its config: {(check.stdout + check.stderr)[-1500:]}")
        self._spawn([exe, "-n", "-q", "-c", str(conf)])


# -- 4. dropbear ------------------------------------------------------------------------------------
class DropbearServer(InteropServer):
    """dropbear; its SFTP subsystem is OpenSSH's sftp-server at the path compiled into dropbear.

    dropbear reads only ~USER/.ssh/authorized_keys: the client key is added there with a
    marker and taken out again by stop().
    """

    name = "dropbear"

    def __init__(self, base: Path, **kw) -> None:
        super().__init__(base, **kw)
        self._marker = f"airflow-transfer-interop-{uuid.uuid4().hex[:12]}"

    @staticmethod
    def sftp_server_path() -> str:
        """Where this dropbear runs the sftp subsystem from (a string in its binary)."""
        exe = shutil.which("dropbear") or "/usr/sbin/dropbear"
        data = Path(exe).read_bytes()
        i = data.find(b"sftp-server\0")
        if i < 0:
            return ""
        start = data.rfind(b"\0", 0, i) + 1
        return data[start : i + len("sftp-server")].decode(errors="replace")

    def _authorized_keys_file(self) -> Path:
        return Path(pwd.getpwnam(self.user).pw_dir) / ".ssh" / "authorized_keys"

    def _edit_authorized_keys(self, add: bool) -> None:
        path = self._authorized_keys_file()
        pw = pwd.getpwnam(self.user)
        if add:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            os.chown(path.parent, pw.pw_uid, pw.pw_gid)
        elif not path.exists():
            return
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            lines = [ln for ln in f.read().splitlines() if not ln.endswith(self._marker)]
            if add:
                kind, blob = Path(f"{self.client_key}.pub").read_text().split()[:2]
                lines.append(f"{kind} {blob} {self._marker}")
            f.seek(0)
            f.truncate()
            f.write("".join(ln + "\n" for ln in lines))
        os.chown(path, pw.pw_uid, pw.pw_gid)
        os.chmod(path, 0o600)

    def _launch(self) -> None:
        _need_root("dropbear")
        exe = _need_exe("dropbear", "dropbear-bin")
        sftp = self.sftp_server_path()
        if sftp and not os.path.exists(sftp):
            raise ServerUnavailable(
                f"dropbear runs {sftp} for SFTP and it is missing (bash scripts/"
                "install-interop-deps.sh links it to OpenSSH's sftp-server)"
            )
        self.version = subprocess.run([exe, "-V"], capture_output=True, text=True).stderr.strip()
        host_key = self.base / "dropbear_ed25519_host_key"
        if not host_key.exists():
            subprocess.run(["dropbearkey", "-t", "ed25519", "-f", str(host_key)], capture_output=True, check=True)
        out = subprocess.run(
            ["dropbearkey", "-y", "-f", str(host_key)], capture_output=True, text=True, check=True
        ).stdout
        self._write_known_hosts(next(ln for ln in out.splitlines() if ln.startswith("ssh-")))
        self._edit_authorized_keys(add=True)
        # -F foreground, -E log to stderr, -s no passwords, -w no root logins, -m no motd
        self._spawn(
            [
                exe,
                "-F",
                "-E",
                "-s",
                "-w",
                "-m",
                "-p",
                f"{self.host}:{self.port}",
                "-r",
                str(host_key),
                "-P",
                str(self.base / "dropbear.pid"),
            ]
        )

    def stop(self) -> None:
        super().stop()
        try:
            self._edit_authorized_keys(add=False)
        except (KeyError, OSError):
            pass


# -- 5 and 6. OpenSSH -------------------------------------------------------------------------------
class OpenSSHServer(InteropServer):
    """OpenSSH sshd as the test suite runs it (tests/support/sshd.py), plain."""

    name = "openssh"

    def __init__(self, base: Path, **kw) -> None:
        super().__init__(base, **kw)
        self.sshd = SSHServer(self.base / "sshd", host=self.host, port=self.port, user=self.user)
        self.client_key = self.sshd.client_key
        self.known_hosts = self.sshd.known_hosts
        self.log_file = self.sshd.log_file

    def _extra_config(self) -> str:
        return ""

    def start(self, timeout: float = 20.0) -> OpenSSHServer:
        self.data.mkdir(parents=True, exist_ok=True)
        chown_to_user(self.data, self.user)
        self.sshd.extra_config = self._extra_config()
        self.sshd.start(timeout=timeout)
        self.version = _ssh_banner(self.host, self.port).split(b"\r\n")[0].decode(errors="replace")
        return self

    def stop(self) -> None:
        self.sshd.stop()


class ForceCommandServer(OpenSSHServer):
    """sshd with `ForceCommand internal-sftp` and `ChrootDirectory` for the login user: no
    commands, and the user sees only the chroot. The chroot (root-owned, as sshd requires
    of every component of its path) holds `data`, owned by the user: the URL path is /data."""

    name = "forcecommand"

    def __init__(self, base: Path, **kw) -> None:
        super().__init__(base, **kw)
        _need_root("ChrootDirectory")
        CHROOT_PARENT.mkdir(parents=True, exist_ok=True)
        os.chown(CHROOT_PARENT, 0, 0)
        os.chmod(CHROOT_PARENT, 0o755)
        self.chroot = Path(tempfile.mkdtemp(prefix="chroot-", dir=CHROOT_PARENT))
        os.chmod(self.chroot, 0o755)
        self.data = self.chroot / "data"
        self.root = "/data"

    def _extra_config(self) -> str:
        return "\n".join(
            [
                f"Match User {self.user}",
                f"    ChrootDirectory {self.chroot}",
                "    ForceCommand internal-sftp",
                "    AllowTcpForwarding no",
                "    X11Forwarding no",
            ]
        )

    def cleanup(self) -> None:
        super().cleanup()
        shutil.rmtree(self.chroot, ignore_errors=True)


CLASSES: dict[str, type[InteropServer]] = {
    "rclone": RcloneServer,
    "asyncssh": AsyncsshServer,
    "proftpd": ProftpdServer,
    "dropbear": DropbearServer,
    "forcecommand": ForceCommandServer,
    "openssh": OpenSSHServer,
}


def make_server(name: str, base: Path) -> InteropServer:
    """The (not yet started) server called `name` (one of SERVERS), keeping its files under `base`."""
    try:
        return CLASSES[name](Path(base))
    except KeyError:
        raise ValueError(f"unknown server {name!r}: one of {', '.join(SERVERS)}") from None


# -- probe ----------------------------------------------------------------------------------------------
class _MiniSFTP:
    """Just enough SFTP v3 to ask a server what it does (draft-ietf-secsh-filexfer-02)."""

    def __init__(self, chan) -> None:
        self.chan, self.rid = chan, 0
        self._send(1, struct.pack(">I", 3))  # INIT, version 3
        t, body = self._recv()
        if t != 2:
            raise RuntimeError(f"expected SSH_FXP_VERSION, got packet type {t}")
        self.version = struct.unpack_from(">I", body)[0]
        self.extensions: dict[str, str] = {}
        pos = 4
        while pos < len(body):
            name, pos = self._str(body, pos)
            data, pos = self._str(body, pos)
            self.extensions[name.decode(errors="replace")] = data.decode(errors="replace")

    @staticmethod
    def _str(buf: bytes, pos: int) -> tuple[bytes, int]:
        (n,) = struct.unpack_from(">I", buf, pos)
        return buf[pos + 4 : pos + 4 + n], pos + 4 + n

    def _send(self, t: int, payload: bytes) -> None:
        self.chan.sendall(struct.pack(">IB", len(payload) + 1, t) + payload)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.chan.recv(n - len(out))
            if not chunk:
                raise EOFError("SFTP channel closed")
            out += chunk
        return out

    def _recv(self) -> tuple[int, bytes]:
        n, t = struct.unpack(">IB", self._exact(5))
        return t, self._exact(n - 1)

    def call(self, t: int, payload: bytes) -> tuple[int, bytes]:
        self.rid += 1
        self._send(t, struct.pack(">I", self.rid) + payload)
        rt, body = self._recv()
        return rt, body[4:]

    @staticmethod
    def s(data: bytes | str) -> bytes:
        data = data.encode() if isinstance(data, str) else data
        return struct.pack(">I", len(data)) + data

    def status(self, t: int, body: bytes) -> str:
        if t != 101:
            return "ok"
        code = struct.unpack_from(">I", body)[0]
        msg, _ = self._str(body, 4) if len(body) > 4 else (b"", 0)
        return "ok" if code == 0 else f"status {code}: {msg.decode(errors='replace')}"

    def open(self, path: str, flags: int) -> bytes:
        t, body = self.call(3, self.s(path) + struct.pack(">II", flags, 0))
        if t != 102:
            raise OSError(self.status(t, body))
        return self._str(body, 0)[0]

    def close(self, handle: bytes) -> str:
        return self.status(*self.call(4, self.s(handle)))

    def read(self, handle: bytes, offset: int, length: int) -> int | str:
        t, body = self.call(5, self.s(handle) + struct.pack(">QI", offset, length))
        return len(self._str(body, 0)[0]) if t == 103 else self.status(t, body)

    def write(self, handle: bytes, offset: int, data: bytes) -> str:
        return self.status(*self.call(6, self.s(handle) + struct.pack(">Q", offset) + self.s(data)))


def _exec(client, command: str, timeout: float = 8.0) -> str:
    import paramiko

    try:
        chan = client.get_transport().open_session(timeout=timeout)
        chan.settimeout(timeout)
        chan.exec_command(command)
    except (paramiko.SSHException, OSError) as exc:
        return f"refused ({exc or type(exc).__name__})"
    out = b""
    try:
        while True:
            chunk = chan.recv(4096)
            if not chunk:
                break
            out += chunk
    except TimeoutError:
        chan.close()
        return f"no answer in {timeout:.0f} s (output so far {out[:60]!r})"
    deadline = time.monotonic() + 3
    while not chan.exit_status_ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    status = chan.recv_exit_status() if chan.exit_status_ready() else None
    chan.close()
    text = out.decode(errors="replace").strip().replace("\n", " ")
    return f"exit {status}: {text[:90]!r}"


PROBE_DIR = ".probe"


def prepare_probe(server: InteropServer) -> None:
    """The file probe() reads, put in place before the server starts (rclone caches listings)."""
    sub = server.make_dir(PROBE_DIR)
    (sub / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    chown_to_user(sub, server.user)


def probe(server: InteropServer) -> dict:
    """What the server tells a client and how it behaves on the calls a copy depends on."""
    import paramiko

    out: dict = {"version": server.version}
    sub = server.local(PROBE_DIR)
    if not (sub / "big.bin").exists():
        prepare_probe(server)
    payload = (sub / "big.bin").read_bytes()
    big = server.remote_path(f"{PROBE_DIR}/big.bin")
    client = paramiko.SSHClient()
    client.load_host_keys(str(server.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            server.host,
            server.port,
            username=server.user,
            key_filename=str(server.client_key),
            look_for_keys=False,
            allow_agent=False,
            timeout=15,
        )
        chan = client.get_transport().open_session()
        chan.settimeout(15)
        chan.invoke_subsystem("sftp")
        sftp = _MiniSFTP(chan)
        out["sftp_version"] = sftp.version
        out["extensions"] = sorted(
            f"{k}={v}" if v and len(v) < 8 else k for k in sftp.extensions for v in [sftp.extensions[k]]
        )
        h = sftp.open(big, 1)  # READ
        out["read_256k_returns"] = sftp.read(h, 0, 256 * 1024)
        out["read_1m_returns"] = sftp.read(h, 0, 1024 * 1024)
        sftp.close(h)
        # A write at an offset ahead of what was written so far (what a parallel range writer
        # sends), then the gap; 2+8+16 = WRITE|CREAT|TRUNC.
        w = server.remote_path(f"{PROBE_DIR}/offsets.bin")
        h = sftp.open(w, 2 | 8 | 16)
        t0 = time.monotonic()
        ahead = sftp.write(h, 65536, payload[65536:131072])
        ahead_s = time.monotonic() - t0
        gap = sftp.write(h, 0, payload[:65536])
        closed = sftp.close(h)
        got = (sub / "offsets.bin").read_bytes() if (sub / "offsets.bin").exists() else b""
        out["offset_write"] = {
            "ahead": ahead,
            "ahead_seconds": round(ahead_s, 2),
            "gap": gap,
            "close": closed,
            "bytes_right": got == payload[:131072],
        }
        chan.close()
        out["exec_md5sum_b"] = _exec(client, f"md5sum -b -- {big}")
        out["exec_md5sum_bare"] = _exec(client, f"md5sum {big}")
        out["exec_sha256sum"] = _exec(client, f"sha256sum {big}")
        out["exec_python3"] = _exec(client, "python3 -c 'print(42)'")
    except Exception as exc:  # noqa: BLE001 - a probe reports, it does not fail the run
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
        shutil.rmtree(sub, ignore_errors=True)
    return out
