"""Disk profiler: write and read bandwidth of one directory over I/O block sizes.

Implements the disk profiler of Stork (Kola, Kosar, Livny, Run-time Adaptation
of Grid Data Placement Jobs, 2003, section 4.1): for a directory and an average
file size it finds the best write and read block sizes, the bandwidth they
reach, and the increment that can be added to the best block size without
losing performance (here: staying within 5 %).

How it measures:
- write: files of the average size are written in block-size chunks and
  fsynced (the fsync is inside the timing, as the paper flushes at the end);
- a round writes every block size's files first, then evicts, then reads
  them all back (so the paper's expensive dummy-file eviction runs once per
  round, not once per block size); a round keeps total / rounds bytes on disk;
- read: before reading, the files are dropped from the page cache with
  posix_fadvise(DONTNEED) after the fsync (their pages are clean then, so the
  kernel does drop them). Where posix_fadvise is missing, the paper's own
  approach is the fallback: read a dummy file larger than the page cache,
  unless writing and reading one (about the memory size) would not fit the
  time budget. The method used, and why, is stated in the output.
- block sizes are powers of two from 4 KiB to 16 MiB (never above the file
  size: a block larger than the file is the same I/O as one file-sized block);
  the sweep is run in `rounds` interleaved rounds and the best figure of each
  block size is kept, which filters out bursts of interference.

Runs on any python3 >= 3.8 with the standard library only. It must stay one
self-contained file: it is piped over SSH as `ssh host python3 - ARGS < disk.py`,
so it imports nothing from its own package.

Prints exactly one JSON object on stdout. Its files live in a private
directory under --path that is removed on success, error, Ctrl-C, SIGTERM and
SIGHUP (a dropped SSH session).
"""

import argparse
import errno
import json
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import time

VERSION = 1
KIB = 1024
MIB = 1024 * 1024
MIN_BLOCK = 4 * KIB
MAX_BLOCK = 16 * MIB
TOLERANCE = 0.05  # "same performance" = within 5 % of the best (task definition)
INCREMENT_PROBES = 4  # increments tried: best, best/2, best/4, best/8
PATTERN = 1 * MIB


class Interrupted(BaseException):
    """Raised from a signal handler so every `finally` (cleanup) runs."""


def parse_size(text: str) -> int:
    """'4096', '64K', '16MiB', '1g' -> bytes (binary units)."""
    value = str(text).strip().lower()
    for suffix in ("ib", "b"):
        if value.endswith(suffix) and value[: -len(suffix)][-1:] in "kmgt":
            value = value[: -len(suffix)]
            break
    scale = {"k": KIB, "m": MIB, "g": 1024 * MIB, "t": 1024 * 1024 * MIB}.get(value[-1:], 1)
    if scale != 1:
        value = value[:-1]
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("not a size: %r (use e.g. 4096, 64K, 16M, 1G)" % text) from None
    if number < 0:
        raise argparse.ArgumentTypeError("sizes must be >= 0 (got %r)" % text)
    return int(number * scale)


def _header() -> dict:
    return {
        "profiler": "disk",
        "version": VERSION,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _filesystem(path: str):
    """Mount point and type holding `path` (Linux /proc/self/mounts), else None.

    A tmpfs result tells the reader the figures are memory, not disk."""
    try:
        with open("/proc/self/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best[0])):
            best = (mount, parts[2], parts[0])
    if best is None:
        return None
    return {"mount": best[0], "type": best[1], "device": best[2]}


def _block_sizes(limit: int) -> list:
    sizes = []
    size = MIN_BLOCK
    while size <= min(limit, MAX_BLOCK):
        sizes.append(size)
        size *= 2
    return sizes or [MIN_BLOCK]


def _mib_s(nbytes: int, seconds: float) -> float:
    return round(nbytes / MIB / max(seconds, 1e-9), 2)


class _Evictor:
    """Keeps reads out of the page cache: fadvise right after each fsync, or the
    paper's dummy file read once between a batch's writes and its reads."""

    def __init__(self, method: str, workdir: str, dummy_size: int) -> None:
        self.workdir = workdir
        self.dummy_path = None
        self.dummy_size = dummy_size
        self.auto = method == "auto"
        fadvise = getattr(os, "posix_fadvise", None) is not None and hasattr(os, "POSIX_FADV_DONTNEED")
        if method == "auto":
            method = "fadvise" if fadvise else "dummy-file"
        if method == "fadvise" and not fadvise:
            raise ValueError(
                "--evict fadvise: os.posix_fadvise is not available on this platform; "
                "use --evict dummy-file or --evict none"
            )
        self.method = method
        if method == "fadvise":
            self.detail = "posix_fadvise(POSIX_FADV_DONTNEED) after fsync"
        elif method == "dummy-file":
            cache = _page_cache_estimate()
            self.detail = (
                "%sread a %d-byte dummy file between each batch's writes and its reads (paper 003 "
                "section 4.1); page cache estimate %s bytes"
                % ("posix_fadvise is unavailable: " if self.auto else "", dummy_size, cache if cache else "unknown")
            )
            if cache and dummy_size < cache:
                self.detail += "; the dummy file is smaller than the page cache, so reads may still hit the cache"
        else:
            self.method = "none"
            self.detail = "no eviction: read figures may come from the page cache"

    def after_write(self, fd: int) -> None:
        if self.method == "fadvise":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def before_read(self, buf: memoryview, write_bps: float, seconds_left: float, passes_left: int) -> None:
        """Read the dummy file (creating it first). In auto mode, give up on it,
        and say so, when writing and reading it would not fit the time left:
        the paper's dummy must outgrow the page cache, i.e. about the memory size."""
        if self.method != "dummy-file":
            return
        if self.dummy_path is None:
            cost = self.dummy_size / max(write_bps, 1.0) * (1 + passes_left)
            if self.auto and cost > seconds_left:
                self.method = "none"
                self.detail = (
                    "posix_fadvise is unavailable and the paper's dummy file (%d bytes, about the "
                    "memory size) would take ~%.0f s to write and read, over the time budget: no "
                    "eviction, read figures may come from the page cache (pass --evict dummy-file, "
                    "--max-seconds or --dummy-size to force it)" % (self.dummy_size, cost)
                )
                return
            self.dummy_path = os.path.join(self.workdir, "dummy")
            _write_file(self.dummy_path, self.dummy_size, PATTERN, _pattern(PATTERN), None)
        _read_file(self.dummy_path, buf, len(buf))

    def as_dict(self) -> dict:
        return {"method": self.method, "detail": self.detail}


def _page_cache_estimate():
    """MemTotal from /proc/meminfo: the page cache can grow to nearly all of it."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _pattern(size: int) -> memoryview:
    # Random bytes so compressing or deduplicating file systems cannot cheat;
    # one random MiB repeated keeps start-up cheap for 32 MiB blocks.
    chunk = os.urandom(PATTERN)
    reps = max(1, -(-size // PATTERN))
    return memoryview(chunk * reps)[:size]


def _write_file(path: str, size: int, block: int, data: memoryview, evictor) -> float:
    """Write `size` bytes in `block`-size writes and fsync; return the seconds taken."""
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        remaining = size
        while remaining > 0:
            n = min(block, remaining)
            remaining -= os.write(fd, data[:n])
        os.fsync(fd)
        elapsed = time.perf_counter() - start
        if evictor is not None:
            evictor.after_write(fd)
    finally:
        os.close(fd)
    return elapsed


def _read_file(path: str, buf: memoryview, block: int) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        view = buf[:block]
        while os.readv(fd, [view]) > 0:
            pass
    finally:
        os.close(fd)
    return time.perf_counter() - start


class _Bench:
    """One private directory, reusable buffers, and the batch primitive."""

    def __init__(
        self,
        workdir: str,
        file_bytes: int,
        files: int,
        evictor: _Evictor,
        max_block: int,
        clock: float,
        max_seconds: float,
        expected_batches: int,
    ) -> None:
        self.workdir = workdir
        self.file_bytes = file_bytes
        self.files = files
        self.evictor = evictor
        self.data = _pattern(max_block)
        self.rbuf = memoryview(bytearray(max(max_block, PATTERN)))
        self.clock, self.max_seconds = clock, max_seconds
        self.batches_left = expected_batches
        self.serial = 0

    def batch(self, pairs: list, deadline: float) -> list:
        """For each (write block, read block): write the trial's files with the
        first size; then evict once; then read every trial's files with the
        second size. Writing stops at `deadline` (monotonic) after at least one
        trial. Returns [(write MiB/s, read MiB/s)] for the trials done; every
        file is removed before returning."""
        trials = []
        try:
            for write_block, read_block in pairs:
                if trials and time.monotonic() > deadline:
                    break
                self.serial += 1
                paths = [os.path.join(self.workdir, "t%d-%d" % (self.serial, i)) for i in range(self.files)]
                trials.append((paths, read_block, 0.0))  # listed before writing, so cleanup finds them
                seconds = sum(
                    _write_file(path, self.file_bytes, write_block, self.data, self.evictor) for path in paths
                )
                trials[-1] = (paths, read_block, seconds)
            self.batches_left -= 1
            total = self.file_bytes * self.files
            best_write = max(total / max(t[2], 1e-9) for t in trials)
            self.evictor.before_read(
                self.rbuf, best_write, self.max_seconds - (time.monotonic() - self.clock), self.batches_left
            )
            out = []
            for paths, read_block, wsec in trials:
                rsec = sum(_read_file(path, self.rbuf, read_block) for path in paths)
                out.append((_mib_s(total, wsec), _mib_s(total, rsec)))
            return out
        finally:
            for paths, _read_block, _seconds in trials:
                for path in paths:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass


def _summarise(best_by_block: dict) -> dict:
    best_block = max(sorted(best_by_block), key=lambda b: best_by_block[b])
    best = best_by_block[best_block]
    return {
        "trials": [{"block": b, "mib_s": best_by_block[b]} for b in sorted(best_by_block)],
        "best_block": best_block,
        "best_mib_s": best,
        "within_5pct": [b for b in sorted(best_by_block) if best_by_block[b] >= best * (1 - TOLERANCE)],
    }


def run(
    path: str = ".",
    file_size: int = 64 * MIB,
    total: int = 512 * MIB,
    rounds: int = 2,
    max_seconds: float = 20.0,
    evict: str = "auto",
    dummy_size: int = 0,
    verbose: bool = False,
) -> dict:
    """Profile the directory `path`; return the result as a dict (see docs/profilers.md).

    file_size: the average file size of the data set (files are written at this
    size, capped at the per-trial budget). total: bytes written by the block
    sweep across all rounds (increment probes come on top, at most 4 trials a round).
    max_seconds: the sweep stops early, marked truncated, when this is reached.
    evict: auto | fadvise | dummy-file | none. dummy_size: dummy file bytes
    (0 = the machine's memory size, which is what defeats the cache)."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1 (got %r)" % rounds)
    if file_size < MIN_BLOCK or total < MIN_BLOCK:
        raise ValueError("file_size and total must be at least %d bytes" % MIN_BLOCK)
    clock = time.monotonic()
    result = _header()
    path = os.path.realpath(path)
    if not os.path.isdir(path):
        raise ValueError("not a directory: %s; pass --path with an existing directory on the disk to profile" % path)
    probe_sizes = _block_sizes(min(file_size, total))
    trial_bytes = max(MIN_BLOCK, total // (len(probe_sizes) * rounds))
    file_bytes = max(MIN_BLOCK, (min(file_size, trial_bytes) // MIN_BLOCK) * MIN_BLOCK)
    files = max(1, trial_bytes // file_bytes)
    blocks = _block_sizes(file_bytes)
    if not dummy_size:
        dummy_size = _page_cache_estimate() or 4 * 1024 * MIB
    result.update(
        {
            "path": path,
            "filesystem": _filesystem(path),
            "file_size": file_size,
            "file_bytes": file_bytes,
            "files_per_trial": files,
            "trial_bytes": file_bytes * files,
            "rounds": rounds,
            "block_sizes": blocks,
        }
    )
    workdir = tempfile.mkdtemp(prefix=".disk-profiler-", dir=path)
    try:
        evictor = _Evictor(evict, workdir, dummy_size)
        bench = _Bench(workdir, file_bytes, files, evictor, 2 * blocks[-1], clock, max_seconds, 2 * rounds)
        best_w, best_r = {}, {}
        truncated = False
        for _round in range(rounds):
            if best_w and time.monotonic() - clock > max_seconds:
                truncated = True
                break
            figures = bench.batch([(b, b) for b in blocks], clock + max_seconds)
            truncated = len(figures) < len(blocks)
            for block, (w, r) in zip(blocks, figures):
                best_w[block] = max(best_w.get(block, 0.0), w)
                best_r[block] = max(best_r.get(block, 0.0), r)
                if verbose:
                    sys.stderr.write("disk: block %8d  write %9.1f MiB/s  read %9.1f MiB/s\n" % (block, w, r))
            if truncated:
                break
        write, read = _summarise(best_w), _summarise(best_r)
        _increments(bench, write, read, file_bytes, rounds, clock + max_seconds * 1.5)
        result.update({"write": write, "read": read, "truncated": truncated})
        result["cache_eviction"] = evictor.as_dict()  # after the sweep: auto mode may have given up the dummy
        fs_type = (result["filesystem"] or {}).get("type")
        if fs_type in ("tmpfs", "ramfs"):
            result["cache_eviction"]["detail"] += "; %s keeps files in memory, so these are memory figures" % fs_type
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["ok"] = True
    result["seconds"] = round(time.monotonic() - clock, 3)
    return result


def _increments(bench: _Bench, write: dict, read: dict, file_bytes: int, rounds: int, deadline: float) -> None:
    """Find, per direction, the largest increment d in (best, best/2, best/4, best/8)
    such that best + d stays within 5 % of the best bandwidth (paper 003 section
    4.1: 'the increment that can be added to the optimal block size to get the
    same performance'). best + best is read from the sweep when it was measured;
    the other candidates are measured in `rounds` batches (both directions in the
    same trials) and keep their best figure, on the same footing as the sweep."""
    sides = {"write": write, "read": read}
    sweep = {side: {t["block"]: t["mib_s"] for t in sides[side]["trials"]} for side in sides}
    candidates = {}  # side -> [block for k = 0..3], None where not testable
    for side, summary in sides.items():
        best = summary["best_block"]
        candidates[side] = [
            best + (best >> k) if (best >> k) >= MIN_BLOCK and best + (best >> k) <= file_bytes else None
            for k in range(INCREMENT_PROBES)
        ]
    figures = {side: {} for side in sides}
    for side in sides:
        for block in candidates[side]:
            if block in sweep[side]:
                figures[side][block] = sweep[side][block]
    pairs = []
    for k in range(INCREMENT_PROBES):
        need = {
            side: candidates[side][k]
            for side in sides
            if candidates[side][k] is not None and candidates[side][k] not in figures[side]
        }
        if need:
            pairs.append((need.get("write", write["best_block"]), need.get("read", read["best_block"]), need))
    for _ in range(rounds if pairs else 0):
        if time.monotonic() > deadline:
            break
        done = bench.batch([(w, r) for w, r, _need in pairs], deadline)
        for (w_fig, r_fig), (_w, _r, need) in zip(done, pairs):
            for side, value in (("write", w_fig), ("read", r_fig)):
                if side in need:
                    block = need[side]
                    figures[side][block] = max(figures[side].get(block, 0.0), value)
    for side, summary in sides.items():
        best, best_mib_s = summary["best_block"], summary["best_mib_s"]
        tried = [b for b in candidates[side] if b is not None and b in figures[side]]
        summary["increment_probes"] = [{"block": b, "mib_s": figures[side][b]} for b in tried]
        passed = [b for b in tried if figures[side][b] >= best_mib_s * (1 - TOLERANCE)]
        if passed:
            summary["increment"] = passed[0] - best  # candidates run from the largest step down
            summary["increment_note"] = "best + increment stayed within 5 % of the best"
        elif not tried:
            summary["increment"] = 0
            summary["increment_note"] = (
                "not measured: best block + increment would exceed the file size "
                "(%d bytes) or the time budget" % file_bytes
            )
        else:
            summary["increment"] = 0
            summary["increment_note"] = "no tested increment kept performance within 5 % of the best"


def _on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def _install_signal_handlers() -> None:
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, _on_signal)


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m profilers.disk",
        description="Disk profiler (paper 003 section 4.1): best read/write block size, its increment "
        "and bandwidth for one directory. Prints one JSON object.",
    )
    parser.add_argument("--path", default=".", help="directory on the disk to profile (default: .)")
    parser.add_argument(
        "--file-size", type=parse_size, default=64 * MIB, help="average file size of the data set (default 64M)"
    )
    parser.add_argument(
        "--total", type=parse_size, default=512 * MIB, help="bytes written by the block sweep in all (default 512M)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved sweep rounds, best kept (default 2)")
    parser.add_argument(
        "--max-seconds", type=float, default=20.0, help="stop the sweep early after this many seconds (default 20)"
    )
    parser.add_argument(
        "--evict",
        choices=("auto", "fadvise", "dummy-file", "none"),
        default="auto",
        help="how to keep reads out of the page cache (default auto: fadvise, else a dummy file)",
    )
    parser.add_argument(
        "--dummy-size", type=parse_size, default=0, help="dummy file size for --evict dummy-file (default: memory size)"
    )
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    _install_signal_handlers()
    try:
        _emit(
            run(
                path=args.path,
                file_size=args.file_size,
                total=args.total,
                rounds=args.rounds,
                max_seconds=args.max_seconds,
                evict=args.evict,
                dummy_size=args.dummy_size,
                verbose=args.verbose,
            )
        )
        return 0
    except (KeyboardInterrupt, Interrupted) as exc:
        reason = str(exc) or "SIGINT"
        _emit(dict(_header(), ok=False, error="interrupted by %s; profiler files removed" % reason))
        return 130
    except (OSError, ValueError) as exc:
        message = "disk profiler failed in %s: %s" % (args.path, exc)
        if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            message += "; lower --total and --file-size or free space there"
        sys.stderr.write(message + "\n")
        _emit(dict(_header(), ok=False, error=message))
        return 1


if __name__ == "__main__":
    sys.exit(main())
