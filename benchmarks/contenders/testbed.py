"""The benchmark testbed: an emulated link, a real OpenSSH sshd in `dst`, measured runs in `src`.

Every contender is a process started inside the `src` namespace by a small
launcher that forks it and reports wait4()'s resource usage: its CPU time and
peak RSS, including every descendant it waited for (the `ssh` that sftp, scp
and rsync start). The server's CPU is the sshd listener's own and its reaped
children's time from /proc: each SSH session, sftp-server, md5sum or rsync
run on the server is a descendant that is reaped before the client's run is
over, so the difference before/after one run is that run's server CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import fs_settle
from benchmarks.wan.link import PROFILES, EmulatedLink
from tests.support.sshd import SSHServer, _descendants, chown_to_user

CLK_TCK = os.sysconf("SC_CLK_TCK")
WORK_ROOT = Path(os.environ.get("AIRFLOW_TRANSFER_BENCH_WORK", "/var/tmp/airflow-transfer-bench/work"))


PR_SET_CHILD_SUBREAPER = 36
# Finished destinations kept in the trash before it is emptied (Testbed.discard), and the fewest
# files whose deletion is worth a settle's wait (benchmarks/fs_settle.py).
TRASH_BYTES = 40 << 30
TRASH_FILES = 200_000
SETTLE_FILES = 1000


def _tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under `path` (a file counts itself)."""
    if not path.is_dir() or path.is_symlink():
        return 1, path.lstat().st_size
    files = size = 0
    for d, _, names in os.walk(path):
        for n in names:
            files += 1
            try:
                size += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass
    return files, size


# Sets the flag, then becomes `ip netns exec ... sshd` (the flag survives execve, see prctl(2)).
_SUBREAPER_EXEC = (
    "import ctypes, os, sys; ctypes.CDLL(None, use_errno=True).prctl(%d, 1, 0, 0, 0); "
    "os.execvp(sys.argv[1], sys.argv[1:])" % PR_SET_CHILD_SUBREAPER
)


class BenchSSHServer(SSHServer):
    """The test sshd without the per-operation sftp log, as a child subreaper.

    The test suite wraps sftp-server in a shell loop that timestamps every
    open/close for its assertions; in a benchmark that loop would be server CPU
    billed to whichever tool opens the most files. Here sftp-server runs bare.

    sshd's privilege-separation monitor exits without waiting for its session
    child, which then goes to init with its CPU time. As a subreaper the
    listener inherits such orphans and reaps them, so its cumulative children's
    time (cutime + cstime) covers every session.
    """

    def _command(self) -> list[str]:
        return [sys.executable, "-c", _SUBREAPER_EXEC, *super()._command()]

    def _sftp_subsystem(self) -> str:
        return next(
            (
                p
                for p in (
                    "/usr/lib/openssh/sftp-server",
                    "/usr/libexec/openssh/sftp-server",
                    "/usr/libexec/sftp-server",
                )
                if os.path.exists(p)
            ),
            "internal-sftp",
        )


# The measured command is forked from this small interpreter (python -S, a few MB), not from
# the runner: a child's peak RSS starts at its parent's size at fork (or, with vfork, at exec),
# so forking the tool from the large runner process would report the runner's size.
# wait4() gives the tool's CPU and peak RSS, including every descendant it reaped.
_LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as exc:
        print("cannot run %s: %s" % (sys.argv[2], exc), file=sys.stderr)
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump([ru.ru_utime + ru.ru_stime, ru.ru_maxrss], f)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass
class Measured:
    """One process run to completion (or killed at its time limit) in `src`."""

    returncode: int
    seconds: float  # wall time from start to exit
    cpu_s: float  # user + system of the process and its reaped descendants
    peak_rss_mb: float  # largest resident set of the process or any reaped descendant
    stdout: str
    stderr: str
    timed_out: bool = False

    def tail(self, chars: int = 600) -> str:
        return (self.stderr.strip() or self.stdout.strip())[-chars:]


class Testbed:
    """A link of one profile with an sshd in `dst`; `run()` measures a command in `src`.

    The sshd's login user is the unprivileged test user (`attest`), so upload
    destinations must be directories it owns (`fresh_remote_dir()`), and
    download sources must be readable by it (the dataset cache is 0755/0644).
    """

    def __init__(self, profile: str, work_root: Path = WORK_ROOT) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown link profile {profile!r}: choose from {', '.join(PROFILES)}")
        self.profile = profile
        self.rtt_ms, self.rate_mbit = PROFILES[profile]
        work_root.mkdir(parents=True, exist_ok=True)
        for p in (work_root, work_root.parent):
            os.chmod(p, 0o755)
        self.work = Path(tempfile.mkdtemp(prefix=f"{profile}-", dir=work_root))
        os.chmod(self.work, 0o755)
        self._trash_files = self._trash_bytes = 0  # in self.work / "trash" (discard)
        self.home = self.work / "home"  # HOME of every contender: no user config leaks in
        self.home.mkdir()
        self.link = EmulatedLink(self.rtt_ms, self.rate_mbit, name=f"bench-{os.getpid()}-{profile}")
        self.sshd: BenchSSHServer | None = None

    # -- lifecycle ------------------------------------------------------------
    def up(self) -> Testbed:
        try:
            self.link.up()
            self.sshd = BenchSSHServer(self.work / "sshd", host=self.link.dst_addr, netns=self.link.dst_ns).start()
        except BaseException:
            self.down()
            raise
        self.ssh_config = self.work / "ssh_config"  # empty: tools take only what their command line says
        self.ssh_config.write_text("")
        return self

    def down(self) -> None:
        try:
            if self.sshd is not None:
                self.sshd.stop()
                self.sshd = None
        finally:
            try:
                self.link.down()
            finally:
                shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Testbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- what contenders connect to ----------------------------------------------
    @property
    def host(self) -> str:
        return self.link.dst_addr

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def user(self) -> str:
        return self._server.user

    @property
    def key(self) -> Path:
        return self._server.client_key

    @property
    def known_hosts(self) -> Path:
        return self._server.known_hosts

    @property
    def host_key_pub(self) -> str:
        """The server's public host key, "type base64"."""
        return " ".join(Path(str(self._server.host_key) + ".pub").read_text().split()[:2])

    @property
    def _server(self) -> BenchSSHServer:
        if self.sshd is None:
            raise RuntimeError("the testbed is not up: call up() first")
        return self.sshd

    def ssh_options(self) -> list[str]:
        """OpenSSH client options shared by sftp, scp and rsync's ssh: key, pinned host key, no prompts."""
        return [
            "-F",
            str(self.ssh_config),
            "-i",
            str(self.key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ]

    # -- directories ------------------------------------------------------------
    def discard(self, path: Path) -> None:
        """Empty `path` (keeping it) by moving what it holds into the trash, not deleting it: the
        next run's creates would pay for that deletion on this VM's filesystem
        (benchmarks/fs_settle.py). The trash is emptied once it holds TRASH_BYTES or TRASH_FILES,
        with a settle's wait where that frees many inodes."""
        trash = self.work / "trash"
        trash.mkdir(exist_ok=True)
        if not path.exists():
            return
        for entry in os.scandir(path):
            files, size = _tree_size(Path(entry.path))
            self._trash_files += files
            self._trash_bytes += size
            fs_settle.discard(Path(entry.path), trash)
        if self._trash_bytes >= TRASH_BYTES or self._trash_files >= TRASH_FILES:
            self.empty_trash()

    def empty_trash(self) -> None:
        trash = self.work / "trash"
        if self._trash_files >= SETTLE_FILES:
            fs_settle.settle(trash)
        else:
            shutil.rmtree(trash, ignore_errors=True)  # a few large files: nothing to wait for
            trash.mkdir()
        self._trash_files = self._trash_bytes = 0

    def fresh_remote_dir(self, name: str) -> Path:
        """An empty directory on the server side, owned by the sshd's login user."""
        path = self.work / "remote" / name
        if path.exists():
            self.discard(path)
            path.rmdir()
        path.mkdir(parents=True)
        os.chmod(path.parent, 0o755)
        chown_to_user(path, self.user)
        return path

    def fresh_local_dir(self, name: str) -> Path:
        """An empty directory on the client side (downloads land here)."""
        path = self.work / "local" / name
        if path.exists():
            self.discard(path)
            path.rmdir()
        path.mkdir(parents=True)
        return path

    # -- measuring ----------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SSH_", "RCLONE_", "AIRFLOW_"))}
        env.update(HOME=str(self.home), LC_ALL="C.UTF-8", **extra)
        return env

    def run(
        self, argv: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> Measured:
        """Runs `argv` in `src` under a small launcher; kills its whole process group at `timeout` seconds."""
        usage_file = Path(tempfile.mkstemp(prefix="usage-", dir=self.work)[1])
        out = tempfile.TemporaryFile(dir=self.work)
        err = tempfile.TemporaryFile(dir=self.work)
        with out, err:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.link.src_ns,
                    sys.executable,
                    "-S",
                    "-c",
                    _LAUNCHER,
                    str(usage_file),
                    *argv,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env or self.env(),
                cwd=cwd,
                start_new_session=True,
            )
            killed = threading.Event()

            def kill() -> None:
                killed.set()
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

            timer = threading.Timer(timeout, kill)
            timer.start()
            try:
                proc.wait()
            finally:
                timer.cancel()
            seconds = time.monotonic() - t0
            # Left-over children in the group (a stray ssh): end them so nothing runs into the next round.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                cpu_s, rss_kib = json.loads(usage_file.read_text() or "[0, 0]")
            except (OSError, ValueError):
                cpu_s, rss_kib = 0.0, 0
            usage_file.unlink(missing_ok=True)
            out.seek(0)
            err.seek(0)
            return Measured(
                proc.returncode,
                seconds,
                cpu_s,
                rss_kib / 1024,
                out.read().decode(errors="replace"),
                err.read().decode(errors="replace"),
                killed.is_set(),
            )

    def server_cpu(self) -> float:
        """CPU seconds the sshd listener and all its reaped descendants have used so far."""
        fields = Path(f"/proc/{self._server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # utime, stime, cutime, cstime are fields 14-17 of stat(5); index 0 here is field 3.
        return sum(int(v) for v in fields[11:15]) / CLK_TCK

    def wait_server_idle(self, timeout: float = 5.0) -> bool:
        """Waits until no SSH session is left (so its CPU has been reaped into the listener's)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _descendants(self._server.proc.pid):
                return True
            time.sleep(0.05)
        return False

    def emulator_cpu(self) -> float:
        """CPU seconds of the link emulator (it also carries both kernels' TCP work: docs/testbed.md)."""
        pid = self.link._emulator_pid
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
