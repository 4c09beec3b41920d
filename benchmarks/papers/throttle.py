"""A destination whose checksum reads are slow: for effect 6 (block-level pipelining, paper 002).

`SlowChecksums(bed, read_bps)` puts the testbed's upload landing directory
(`bed.work/remote`) on an ext4 file system in a loop device of its own, and
gives every checksum helper the bed's sshd starts a cgroup v1 blkio throttle of
`read_bps` bytes/s on that loop device. Nothing else is slowed: the sshd and
sftp-server write at full speed, the runner's landing check reads unthrottled.

Why a loop device: the helper fsyncs, drops the range from the page cache and
reads it back (airflow_transfer/remote/checksum_helper.py), so its reads reach
the block device and a read throttle slows exactly them. The VM's own disk has
8 MiB of readahead, which the helper's drop-before-read throws away, so it would
read each 8 MiB block about twice; a loop device has its own readahead (set to
128 KiB here), and the throttle then gives c = block / read_bps.

Why one cgroup per helper: each `--verify-threads` thread runs its own helper,
so every checksum stream reads at read_bps and n of them at n x read_bps, the
way n cores each hash at one core's speed in the paper's section III.B. The
sshd listener is moved into a plain cgroup before any connection, so its
descendants can be found by reading one file; a watcher thread moves each
process whose command line is the helper's bootstrap into a throttled cgroup of
its own, within a few milliseconds of its start (the helper reads nothing before
the client's first request, at least one round trip later).

Every mount, loop device and cgroup made here is undone by close() (also after
a failure), and setup first removes whatever a killed earlier run left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from airflow_transfer.integrity.helper_client import BOOTSTRAP

BLKIO = Path("/sys/fs/cgroup/blkio")
GROUP = BLKIO / "airflow-transfer-e6"
IMAGE_DIR = Path(os.environ.get("AIRFLOW_TRANSFER_BENCH_WORK", "/var/tmp/airflow-transfer-bench/work")).parent
IMAGE = IMAGE_DIR / "e6-destination.img"
READ_AHEAD_KB = 128  # the kernel's default for a block device; the VM disk's is 8 MiB
POLL_S = 0.005
READS_EVERY = 10  # polls between two samples of the helpers' read bytes (50 ms)
_HELPER = BOOTSTRAP.encode()


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60)


def _pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _move_all_to_root(group: Path) -> None:
    for sub in sorted(group.rglob("cgroup.procs"), key=lambda p: -len(p.parts)):
        for pid in _pids(sub.parent):
            try:
                (BLKIO / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # the process ended meanwhile


def _remove_group(group: Path) -> None:
    if not group.exists():
        return
    _move_all_to_root(group)
    for sub in sorted((p for p in group.iterdir() if p.is_dir()), key=lambda p: p.name):
        sub.rmdir()
    group.rmdir()


def _loops_of(image: Path) -> list[str]:
    out = _run(["losetup", "-j", str(image)], check=False).stdout
    return [line.split(":", 1)[0] for line in out.splitlines() if line.strip()]


def _mounted(mountinfo: Path, target: Path) -> bool:
    try:
        return any(line.split()[4] == str(target) for line in mountinfo.read_text().splitlines())
    except OSError:
        return False


class SlowChecksums:
    """The bed's landing directory on a throttled loop device, while the object is open."""

    def __init__(self, bed: Any, read_bps: int, image_bytes: int = 2 << 30) -> None:
        if not (BLKIO / "blkio.throttle.read_bps_device").exists():
            raise RuntimeError("effect 6 needs the cgroup v1 blkio controller at /sys/fs/cgroup/blkio")
        self.bed, self.read_bps, self.image_bytes = bed, read_bps, image_bytes
        self.sshd_pid: int = bed.sshd.proc.pid
        self.target = Path(bed.work) / "remote"
        self.loop: str | None = None
        self.device = ""  # "major:minor" of the loop device
        self.helpers: dict[int, float] = {}  # pid -> seconds from its start to its confinement
        self.reads: list[tuple[float, int]] = []  # (seconds since mark(), helper bytes read), on change
        self.busy: dict[int, float] = {}  # helper pid -> seconds it was not waiting for a request
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- setup ---------------------------------------------------------------------------
    def __enter__(self) -> SlowChecksums:
        try:
            self._clean_stale()
            self._mount()
            self._cgroups()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _clean_stale(self) -> None:
        """What a killed earlier run may have left: the cgroups, mounts of the image, its loop devices."""
        _remove_group(GROUP)
        for loop in _loops_of(IMAGE):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                if line.split(" - ", 1)[1].split()[1] == loop:
                    _run(["umount", "-l", line.split()[4]], check=False)
            if _mounted(Path(f"/proc/{self.sshd_pid}/mountinfo"), self.target):
                _run(["nsenter", "-t", str(self.sshd_pid), "-m", "umount", "-l", str(self.target)], check=False)
            _run(["losetup", "-d", loop], check=False)
        IMAGE.unlink(missing_ok=True)

    def _mount(self) -> None:
        IMAGE.parent.mkdir(parents=True, exist_ok=True)
        with open(IMAGE, "wb") as f:
            f.truncate(self.image_bytes)  # sparse: only what lands takes space
        _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(IMAGE)])
        self.loop = _run(["losetup", "--find", "--show", str(IMAGE)]).stdout.strip()
        name = Path(self.loop).name
        self.device = Path(f"/sys/block/{name}/dev").read_text().strip()
        Path(f"/sys/block/{name}/queue/read_ahead_kb").write_text(str(READ_AHEAD_KB))
        if self.target.exists():
            shutil.rmtree(self.target)
        self.target.mkdir(parents=True)
        # The sshd runs in a mount namespace of its own (ip netns exec) whose root is private:
        # a mount made here does not reach it, so the loop device is mounted in both.
        _run(["mount", self.loop, str(self.target)])
        _run(["nsenter", "-t", str(self.sshd_pid), "-m", "mount", self.loop, str(self.target)])
        os.chmod(self.target, 0o755)

    def _cgroups(self) -> None:
        GROUP.mkdir()
        (GROUP / "sshd").mkdir()
        (GROUP / "sshd" / "cgroup.procs").write_text(str(self.sshd_pid))
        self._watcher = threading.Thread(target=self._watch, name="e6-helper-watch", daemon=True)
        self._watcher.start()

    def _throttled_group(self, name: str) -> Path:
        group = GROUP / name
        group.mkdir(exist_ok=True)
        (group / "blkio.throttle.read_bps_device").write_text(f"{self.device} {self.read_bps}")
        return group

    # -- the helpers ---------------------------------------------------------------------
    def _watch(self) -> None:
        settled = {self.sshd_pid}  # processes that will never become a helper
        polls = 0
        while not self._stop.wait(POLL_S):
            polls += 1
            if polls % READS_EVERY == 0:
                self._sample_reads()
            for pid in _pids(GROUP / "sshd"):
                if pid in settled:
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"sftp-server" in cmd:
                    settled.add(pid)
                elif _HELPER in cmd:
                    try:
                        (self._throttled_group(f"h{pid}") / "cgroup.procs").write_text(str(pid))
                    except OSError:
                        continue  # it ended before it was moved: it read nothing
                    self.helpers[pid] = _age_s(pid)

    def mark(self) -> None:
        """Starts the read timeline afresh: call it just before the copy."""
        self._t0 = time.monotonic()
        self.reads, self.busy = [], {}

    def _sample_reads(self) -> None:
        # Busy = running or in uninterruptible wait (fsync, a throttled read); an idle helper
        # sleeps reading its stdin. The byte counters cannot tell: the throttle releases in bursts.
        for pid in list(self.helpers):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in ("R", "D"):
                self.busy[pid] = self.busy.get(pid, 0.0) + POLL_S * READS_EVERY
        n = self.helper_read_bytes()
        if n and (not self.reads or self.reads[-1][1] != n):
            self.reads.append((round(time.monotonic() - self._t0, 3), n))

    def set_rate(self, read_bps: int) -> None:
        """The throttle of helpers confined from now on (between copies)."""
        self.read_bps = read_bps

    def helper_read_bytes(self) -> int:
        """Bytes the confined helpers have read from the loop device so far."""
        total = 0
        for group in GROUP.glob("h*"):
            try:
                lines = (group / "blkio.throttle.io_service_bytes").read_text().splitlines()
            except OSError:
                continue
            total += sum(int(v[2]) for v in (ln.split() for ln in lines) if v[:2] == [self.device, "Read"])
        return total

    def run_confined(
        self, argv: list[str], timeout: float, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs `argv` here with its reads of the loop device throttled like a helper's."""
        procs = self._throttled_group("probe") / "cgroup.procs"
        # The shell joins the cgroup, then becomes the command: not one read escapes the throttle.
        return subprocess.run(
            ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            check=False,
        )

    # -- teardown ------------------------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        errors: list[str] = []
        for step in (self._drop_cgroups, self._unmount):
            try:
                step()
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{step.__name__}: {exc}")
        if errors:
            raise RuntimeError("effect 6 could not undo its setup: " + "; ".join(errors))

    def _drop_cgroups(self) -> None:
        _remove_group(GROUP)

    def _unmount(self) -> None:
        if _mounted(Path(f"/proc/{self.sshd_pid}/mountinfo"), self.target):
            _run(["nsenter", "-t", str(self.sshd_pid), "-m", "umount", str(self.target)])
        if _mounted(Path("/proc/self/mountinfo"), self.target):
            _run(["umount", str(self.target)])
        if self.loop:
            _run(["losetup", "-d", self.loop])
            self.loop = None
        IMAGE.unlink(missing_ok=True)


def _age_s(pid: int) -> float:
    """Seconds since `pid` started (10 ms resolution)."""
    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return round(time.clock_gettime(time.CLOCK_BOOTTIME) - start / os.sysconf("SC_CLK_TCK"), 3)
