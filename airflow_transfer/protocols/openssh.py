"""SFTP data connections carried by OpenSSH's `ssh` client, one process per connection.

Why: on the emulated wan50 link the engine is CPU-bound, and paramiko's cipher and
framing cost more per byte than OpenSSH's C client. Raw streams reached 403 Mbit/s with
4 `ssh` processes against 325 with 4 paramiko connections in one process
(`python -m benchmarks.ssh_ceiling`, benchmarks/results/ssh-ceiling.md). Each `ssh`
process encrypts on its own CPU time, outside the engine's GIL. The engine still speaks
SFTP itself (sftp_wire.py) over the process's stdin and stdout, so pipelining, block
checksums and error mapping do not change.

It is used only where it weakens nothing: keys come from files (or the connection's key
text, written 0600 into a private directory for the life of the process), the host key is
checked against the same known_hosts files or the pinned key, and BatchMode stops it from
ever prompting; the key text is removed as soon as the SFTP handshake has succeeded.
Passwords, passphrases and agents stay on paramiko (`usable()`).
"""

from __future__ import annotations

import base64
import fcntl
import os
import select
import shlex
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import IO

from .sftp_wire import SFTPProtocolError
from .ssh import CONNECT_TIMEOUT, PREFERRED_CIPHERS, SSHTarget, pinned_blob

PREFERRED_KEX = ("curve25519-sha256", "curve25519-sha256@libssh.org")

# Pipes default to 64 KiB; SFTP writes are up to 255 KiB, so a larger pipe halves the
# wake-ups between the engine and its `ssh`. Linux allows up to pipe-max-size (1 MiB).
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
# Replies read while a write waits for room are kept here; past this much the write
# stops reading, which only happens when the engine has stopped consuming replies.
_EARLY_LIMIT = 64 << 20


def ssh_binary() -> str | None:
    return shutil.which("ssh")


def usable(target: SSHTarget) -> str:
    """Why OpenSSH cannot carry this target ("" when it can). A list of early returns."""
    if target.client == "paramiko":
        return "the connection asks for paramiko"
    if ssh_binary() is None:
        return "no `ssh` client on PATH"
    if target.password:
        return "password authentication needs paramiko (BatchMode never prompts)"
    if target.passphrase:
        return "an encrypted key's passphrase needs paramiko"
    if target.allow_agent:
        return "agent authentication stays on paramiko"
    if not (target.key_filenames or target.private_key):
        return "no key file to give `ssh`"
    hop = target.jump
    while hop is not None:
        if hop.passphrase:
            return f"jump host {hop.display}: an encrypted key's passphrase needs paramiko"
        if not (hop.key_filenames or hop.private_key):
            return f"jump host {hop.display}: no key file to give `ssh`"
        hop = hop.jump
    return ""


# paramiko's disabled_algorithms kinds -> OpenSSH's options ("-names" removes them from its defaults)
_OPENSSH_ALGORITHMS = {
    "ciphers": "Ciphers",
    "macs": "MACs",
    "kex": "KexAlgorithms",
    "keys": "HostKeyAlgorithms",
    "pubkeys": "PubkeyAcceptedAlgorithms",
}


def algorithm_options(t: SSHTarget) -> dict[str, str]:
    """`ssh -o` options for the target's cipher preference and disabled algorithms."""
    disabled = {kind: names for kind, names in t.disabled_algorithms.items() if names}
    opts = {_OPENSSH_ALGORITHMS[kind]: "-" + ",".join(names) for kind, names in disabled.items()}
    if t.ciphers:
        opts["Ciphers"] = ",".join(c for c in t.ciphers if c not in disabled.get("ciphers", ()))
    elif "ciphers" not in disabled:
        # '^' moves these to the front of OpenSSH's own list; servers without them still connect.
        opts["Ciphers"] = "^" + ",".join(PREFERRED_CIPHERS)
    if "kex" not in disabled:
        # OpenSSH 9's first choice, the hybrid sntrup761x25519, cost each `ssh` this tool starts
        # 0.07-0.08 s of CPU and 0.08 s of wall time on loopback (0.21 against 0.13 s a login), which
        # a download of small files pays once per channel. curve25519 is what the paramiko
        # connections of the same copy negotiate, so the copy as a whole keeps its strength.
        opts["KexAlgorithms"] = "^" + ",".join(PREFERRED_KEX)
    return opts


def _key_type(blob_b64: str) -> str:
    """The key type named inside an SSH public key blob (RFC 4253 section 6.6). A malformed
    blob gets a type no server offers: `ssh` then refuses the host and paramiko reports why."""
    try:
        raw = base64.b64decode(blob_b64)
        (n,) = struct.unpack_from(">I", raw, 0)
        return raw[4 : 4 + n].decode("ascii")
    except (ValueError, struct.error):  # binascii.Error and UnicodeDecodeError are ValueErrors
        return "malformed-pinned-key"


def _pipe(stream: IO[bytes] | None, name: str) -> IO[bytes]:
    if stream is None:  # Popen with PIPE always makes it: only a changed call above gets here
        raise RuntimeError(f"the ssh client was started without a {name} pipe")
    return stream


class PipedProcess:
    """A child process spoken to over its stdin and stdout: what PipeChannel carries."""

    def __init__(self, argv: list[str], new_session: bool = False) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=new_session,
        )
        self.stdin, self.stdout = _pipe(self.proc.stdin, "stdin"), _pipe(self.proc.stdout, "stdout")
        for f in (self.stdin, self.stdout):
            try:
                fcntl.fcntl(f.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:  # above pipe-max-size for an unprivileged user: keep the default
                pass

    def is_active(self) -> bool:
        return self.proc.poll() is None

    def exit_status(self) -> int | None:
        """The exit status (for `ssh`: the remote command's, 255 for its own failure), None while it runs."""
        return self.proc.poll()

    def stderr_tail(self) -> str:
        """What the process said before it exited (host key or auth failures), for error messages."""
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        try:
            return self.proc.stderr.read(4096).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class OpenSSHProcess(PipedProcess):
    """One `ssh -s host sftp` process: what paramiko's Transport is to a paramiko channel.
    With `command`, one `ssh host command` instead (the bundle helper's exec channel)."""

    def __init__(self, target: SSHTarget, command: str | None = None) -> None:
        self.target = target
        self.command = command
        self._private = Path(tempfile.mkdtemp(prefix="at-ssh-"))  # mkdtemp makes it 0700
        try:
            super().__init__(self._argv(), new_session=True)
        except BaseException:
            shutil.rmtree(self._private, ignore_errors=True)
            raise

    def _argv(self) -> list[str]:
        t = self.target
        # "--" ends options: a host name can never be read as one.
        if self.command is not None:
            return [*self._client_argv(t, "id"), "--", t.host, self.command]
        return [*self._client_argv(t, "id"), "-s", "--", t.host, "sftp"]

    def _client_argv(self, t: SSHTarget, tag: str) -> list[str]:
        """`ssh` and its options for host `t` (without the host); `tag` names its files in the private directory."""
        opts = {
            "BatchMode": "yes",
            "Compression": "no",
            "ForwardX11": "no",
            "ForwardAgent": "no",
            "ClearAllForwardings": "yes",
            "ControlMaster": "no",
            "ControlPath": "none",
            "IdentityAgent": "none",
            "IdentitiesOnly": "yes",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
            "ConnectTimeout": str(max(1, int(t.timeout or CONNECT_TIMEOUT))),
            "LogLevel": "ERROR",
            "GlobalKnownHostsFile": "/dev/null",
            **algorithm_options(t),
        }
        if not t.check_host_key:
            opts |= {"StrictHostKeyChecking": "no", "UserKnownHostsFile": "/dev/null"}
        elif t.host_key:
            blob = pinned_blob(t.host_key)
            pinned = self._private / f"known_hosts-{tag}"
            pinned.write_text(f"{t.known_hosts_name} {_key_type(blob)} {blob}\n")
            opts |= {"StrictHostKeyChecking": "yes", "UserKnownHostsFile": str(pinned)}
        else:
            files = [p for p in t.known_hosts if p and os.path.exists(p)]
            opts |= {
                "StrictHostKeyChecking": "yes",
                "UserKnownHostsFile": " ".join(f'"{p}"' for p in files) or "/dev/null",
            }
        if t.jump is not None:
            opts["ProxyCommand"] = self._jump_command(t, f"{tag}-jump")
        elif t.proxy_command:
            opts["ProxyCommand"] = t.proxy_command.replace("%", "%%")  # its tokens are expanded already
        keys = list(t.key_filenames)
        if t.private_key:
            key = self._private / tag
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(t.private_key if t.private_key.endswith("\n") else t.private_key + "\n")
            keys.append(str(key))
        argv = [ssh_binary() or "ssh", "-F", "/dev/null", "-T", "-x", "-a", "-p", str(t.port)]
        if t.username:
            argv += ["-l", t.username]
        for k in keys:
            argv += ["-i", k]
        for name, value in opts.items():
            argv += ["-o", f"{name}={value}"]
        return argv

    def _jump_command(self, t: SSHTarget, tag: str) -> str:
        """A ProxyCommand that reaches `t` through its jump host: `ssh -W host:port jump`, with the
        jump host's own options (not `-J`, which would hand the jump host none of them)."""
        hop = t.jump
        assert hop is not None  # the caller checked
        host = f"[{t.host}]" if ":" in t.host else t.host
        argv = [*self._client_argv(hop, tag), "-W", f"{host}:{t.port}", "--", hop.host]
        # ssh runs it through the shell and expands % tokens in it: quote, and keep every % literal
        return " ".join(shlex.quote(a) for a in argv).replace("%", "%%")

    def forget_files(self) -> None:
        """Remove the key text and pinned host key: `ssh` has read both once it is authenticated."""
        shutil.rmtree(self._private, ignore_errors=True)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._private, ignore_errors=True)


class PipeChannel:
    """The part of paramiko's Channel that SFTPWire uses, over an `ssh` process's pipes.

    A write that waits for room in the pipe also reads whatever `ssh` has for us, so a
    server blocked on sending replies can never deadlock against a client blocked on
    sending requests (downloads send many small READs and receive large DATA)."""

    def __init__(self, proc: PipedProcess, timeout: float | None = None) -> None:
        self._proc = proc
        self._w = proc.stdin.fileno()
        self._r = proc.stdout.fileno()
        os.set_blocking(self._w, False)
        os.set_blocking(self._r, False)
        self._early = bytearray()
        self._timeout = timeout
        # Another thread reads this channel (a bundle helper's output copied to the lander's
        # input): a write that waits for room must then not read replies that are not its own.
        self.reader_elsewhere = False

    @property
    def process(self) -> PipedProcess:
        """The process at the other end of the pipes."""
        return self._proc

    @property
    def read_fd(self) -> int:
        """The process's output (non-blocking), for a reader that moves it elsewhere itself."""
        return self._r

    @property
    def write_fd(self) -> int:
        """The process's input (non-blocking), for a writer that fills it itself."""
        return self._w

    def buffered(self) -> bool:
        """Output read already (by a write that waited for room) and not yet taken by recv."""
        return bool(self._early)

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        return self._timeout

    def _gone(self, exc: BaseException | None = None) -> ConnectionError:
        what = "the ssh client exited" if exc is None else f"the ssh client's pipe broke ({exc})"
        said = self._proc.stderr_tail()
        return SFTPProtocolError(f"{what}: {said}" if said else what)

    def _read_some(self, n: int) -> bytes | None:
        """Up to n bytes, b"" at end of file, None when nothing is there yet."""
        try:
            return os.read(self._r, n)
        except BlockingIOError:
            return None
        except (ValueError, OSError) as exc:  # the pipe was closed under us
            raise self._gone(exc) from exc

    def sendall(self, data) -> None:
        view = memoryview(data).cast("B")
        while view:
            try:
                sent = os.write(self._w, view[:PIPE_BYTES])
                view = view[sent:]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, ValueError, OSError) as exc:
                raise self._gone(exc) from exc
            readers = [self._r] if len(self._early) < _EARLY_LIMIT and not self.reader_elsewhere else []
            r, w, _ = select.select(readers, [self._w], [], self._timeout)
            if not r and not w:
                raise TimeoutError(f"no room in the ssh client's pipe for {self._timeout}s")
            if r:
                got = self._read_some(1 << 20)
                if got == b"":
                    raise self._gone()
                if got:
                    self._early += got

    def shutdown_write(self) -> None:
        """End of input for the process (it answers what it has read, then exits); reading goes on."""
        try:
            self._proc.stdin.close()
        except OSError:
            pass

    def exit_status_ready(self) -> bool:
        return self._proc.exit_status() is not None

    def recv_exit_status(self) -> int:
        """Waits for the process, as paramiko's Channel does for the remote command."""
        self._proc.proc.wait(timeout=self._timeout)
        return int(self._proc.proc.returncode)

    def recv_ready(self) -> bool:
        return bool(self._early) or bool(select.select([self._r], [], [], 0)[0])

    def recv(self, n: int) -> bytes:
        if self._early:
            out = bytes(self._early[:n])
            del self._early[:n]
            return out
        while True:
            got = self._read_some(n)
            if got is not None:
                return got  # b"" at end of file: the wire reports the closed channel
            if not select.select([self._r], [], [], self._timeout)[0]:
                raise TimeoutError(f"no data from the ssh client for {self._timeout}s")

    def close(self) -> None:
        self._proc.close()
