"""A real OpenSSH sshd for tests: generated keys, loopback port, its own log.

The server runs as root when the tests do (CI) and logs the test user in; the
test user is an unprivileged account (`attest`, made by scripts/setup-test-deps.sh)
so permission errors are real. Run as a normal user, sshd runs unprivileged and
logs that same user in.

internal-sftp logs every open/close/rename with the session's pid at INFO, and
sshd's -E log file receives them: tests read that log to observe pp, p and cc
from the server's side.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

from airflow_transfer.protocols.ssh import SSHTarget

TEST_USER = "attest"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "airflow-transfer-test", "-f", str(path)],
        check=True,
    )


def login_user() -> str:
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(TEST_USER)
        except KeyError as exc:
            raise RuntimeError(
                f"test user {TEST_USER!r} is missing: run `bash scripts/setup-test-deps.sh` (make test does)"
            ) from exc
        return TEST_USER
    return pwd.getpwuid(os.geteuid()).pw_name


def chown_to_user(path: Path, user: str) -> None:
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), pw.pw_uid, pw.pw_gid)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            stat = (pid_dir / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(pid_dir.name))
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def _server_socket_inodes(port: int) -> set[str]:
    """Inodes of TCP sockets whose local port is `port` (listening or connected), IPv4 and IPv6."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[9] != "0":  # inode 0: TIME_WAIT, owned by nobody
                inodes.add(fields[9])
    return inodes


def _pids_holding(inodes: set[str]) -> set[int]:
    wanted = {f"socket:[{i}]" for i in inodes}
    pids: set[int] = set()
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                try:
                    if os.readlink(fd) in wanted:
                        pids.add(int(pid_dir.name))
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return pids


@dataclass
class SSHServer:
    """One sshd process. `start()` returns when it accepts connections."""

    base: Path  # a directory for keys, config and logs (world-traversable)
    host: str = "127.0.0.1"
    port: int = 0
    netns: str | None = None  # run inside this network namespace
    extra_config: str = ""
    password_auth: bool = False  # also accept the login user's password (tests/test_secrets.py)
    user: str = field(default_factory=login_user)
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.base = Path(self.base)
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        if not self.port:
            self.port = free_port(self.host) if self.netns is None else 2222
        self.host_key = self.base / "ssh_host_ed25519_key"
        self.client_key = self.base / "id_ed25519"
        self.other_key = self.base / "id_other"  # a key the server does not accept
        self.known_hosts = self.base / "known_hosts"
        self.authorized_keys = self.base / "authorized_keys"
        self.config_file = self.base / "sshd_config"
        self.log_file = self.base / "sshd.log"
        self.pid_file = self.base / "sshd.pid"
        self.ssh_config = self.base / "ssh_config"
        self.sftp_log = self.base / "sftp.log"

    # -- setup -----------------------------------------------------------
    def _write_files(self) -> None:
        for key in (self.host_key, self.client_key, self.other_key):
            if not key.exists():
                _keygen(key)
        self.authorized_keys.write_text(Path(str(self.client_key) + ".pub").read_text())
        self.sftp_log.touch()
        os.chmod(self.sftp_log, 0o666)
        os.chmod(self.authorized_keys, 0o644)
        host_pub = Path(str(self.host_key) + ".pub").read_text().split()
        hostname = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        self.known_hosts.write_text(f"{hostname} {host_pub[0]} {host_pub[1]}\n")
        self.config_file.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.host}:{self.port}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.pid_file}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "StrictModes no",
                    f"PasswordAuthentication {'yes' if self.password_auth else 'no'}",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    f"AllowUsers {self.user}",
                    "MaxSessions 64",
                    "MaxStartups 200:30:400",
                    "LogLevel VERBOSE",
                    f"Subsystem sftp {self._sftp_subsystem()}",
                    self.extra_config,
                    "",
                ]
            )
        )
        self.ssh_config.write_text(
            "\n".join(
                [
                    "Host testhost",
                    f"  HostName {self.host}",
                    f"  Port {self.port}",
                    f"  User {self.user}",
                    f"  IdentityFile {self.client_key}",
                    f"  UserKnownHostsFile {self.known_hosts}",
                    "  StrictHostKeyChecking yes",
                    "",
                ]
            )
        )

    def _sftp_subsystem(self) -> str:
        # Each sftp-server logs to stderr; a wrapper prefixes every line with
        # the server's pid and appends it to one file, so the order across
        # sessions is kept. (sshd_config strips quotes, hence a script file.)
        server = next(
            (
                p
                for p in (
                    "/usr/lib/openssh/sftp-server",
                    "/usr/libexec/openssh/sftp-server",
                    "/usr/libexec/sftp-server",
                )
                if os.path.exists(p)
            ),
            "sftp-server",
        )
        wrapper = self.base / "sftp-wrapper.sh"
        wrapper.write_text(
            "#!/bin/bash\n"
            f'exec {server} -e -l INFO "$@" 2> >(while IFS= read -r l; do '
            f'printf \'%s %s\\n\' "$$" "$l"; done >> {self.sftp_log})\n'
        )
        os.chmod(wrapper, 0o755)
        return str(wrapper)

    def _command(self) -> list[str]:
        cmd = [SSHD, "-D", "-e", "-E", str(self.log_file), "-f", str(self.config_file)]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        return cmd

    def start(self, timeout: float = 10.0) -> SSHServer:
        self._write_files()
        Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
        self.proc = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            if self._accepting():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not accept connections on {self.host}:{self.port} within {timeout}s")

    def _accepting(self) -> bool:
        if self.netns:
            return "Server listening" in self.log_text()
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the listener and every session it served: afterwards nothing answers on the port."""
        if self.proc is None:
            return
        # Freeze the listener first: a connection accepted while we collect its
        # children would otherwise fork a session nobody kills (session children
        # setsid and rewrite their argv, so neither killpg nor the marker finds it).
        try:
            os.kill(self.proc.pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
        for pid in _descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._kill_children()
        if self.netns is None:
            self._kill_port_holders()
        self.proc = None

    def _kill_port_holders(self, timeout: float = 5.0) -> None:
        """SIGKILL whatever still holds a server-side socket on our port, until none does."""
        deadline = time.monotonic() + timeout
        while True:
            inodes = _server_socket_inodes(self.port)
            holders = _pids_holding(inodes) if inodes else set()
            if not holders:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on port {self.port}: processes {sorted(holders)} survive SIGKILL")
            for pid in holders:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def _kill_children(self) -> None:
        marker = str(self.config_file)
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                try:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def restart(self) -> None:
        self.stop()
        self.start()

    # -- observation -------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_mark(self) -> int:
        """Offset into the SFTP log, so a test reads only what its own transfer caused."""
        try:
            return self.sftp_log.stat().st_size
        except FileNotFoundError:
            return 0

    def sftp_events(self, since: int = 0, until: int | None = None) -> list[tuple[int, str, str]]:
        """(sftp-server pid, operation, path) for each session open/close and
        file open/close/rename logged since `since` (up to the mark `until`), in the order they happened."""
        with open(self.sftp_log, "rb") as f:
            f.seek(since)
            text = f.read(-1 if until is None else max(0, until - since)).decode(errors="replace")
        events = []
        for line in text.splitlines():
            m = re.match(r"(\d+) (open|close|rename|session opened|session closed)\b(.*)", line)
            if not m:
                continue
            pid, op, rest = int(m.group(1)), m.group(2), m.group(3)
            pm = re.search(r'"([^"]*)"', rest)
            events.append((pid, op, pm.group(1) if pm else rest.strip()))
        return events

    def url(self, path: str) -> str:
        return f"sftp://{self.user}@{self.host}:{self.port}{path}"

    def target_fields(self, **overrides) -> dict:
        """The fields of target(), as plain values (for a target built in another process)."""
        base = dict(
            host=self.host,
            port=self.port,
            username=self.user,
            key_filenames=[str(self.client_key)],
            known_hosts=[str(self.known_hosts)],
        )
        return {**base, **overrides}

    def target(self, **overrides) -> SSHTarget:
        """An SSHTarget for this server: its address, user, client key and known_hosts."""
        return SSHTarget(**self.target_fields(**overrides))

    def connect_kwargs(self) -> dict:
        return {
            "host": self.host,
            "port": self.port,
            "username": self.user,
            "key_filename": str(self.client_key),
            "known_hosts": str(self.known_hosts),
        }


def max_concurrent(
    events: list[tuple[int, str, str]], start_op: str, end_op: str, key: Callable[[int, str], Hashable | None]
) -> int:
    """Most keys open at once in SSHServer.sftp_events output; key(pid, path) names what is counted (None: skipped)."""
    open_, best = set(), 0
    for pid, op, path in events:
        k = key(pid, path)
        if k is None:
            continue
        if op == start_op:
            open_.add(k)
        elif op == end_op:
            open_.discard(k)
        best = max(best, len(open_))
    return best


def bin_without_python(base: Path) -> Path:
    """A PATH directory with every system command except python."""
    out = base / "nopython-bin"
    out.mkdir(parents=True, exist_ok=True)
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(d):
            if name.startswith("python") or (out / name).exists():
                continue
            (out / name).symlink_to(os.path.join(d, name))
    return out


class _NoSFTPServer(SSHServer):
    """An sshd with no SFTP subsystem at all: the request for it is refused."""

    def _write_files(self) -> None:
        super()._write_files()
        lines = self.config_file.read_text().splitlines()
        self.config_file.write_text("\n".join(line for line in lines if not line.startswith("Subsystem sftp")) + "\n")


def restricted_sshd(base: Path, case: str) -> SSHServer:
    """A started sshd whose sessions find no python ("no-python": coreutils fall-backs), may
    run nothing but SFTP ("no-exec": read-back and SFTP listing fall-backs) or have no SFTP
    subsystem ("no-sftp": the request for it is refused)."""
    if case not in ("no-python", "no-exec", "no-sftp"):
        raise ValueError(f"unknown restriction {case!r}")
    if case == "no-sftp":
        return _NoSFTPServer(base).start()
    server = SSHServer(base)
    server._write_files()
    if case == "no-python":
        server.extra_config = f"SetEnv PATH={bin_without_python(base)}"
    else:
        server.extra_config = f"ForceCommand {server._sftp_subsystem()}"
    return server.start()
