"""Memory profiler: memory-to-memory copy bandwidth over block sizes.

Implements the memory profiler of Stork (Kola, Kosar, Livny, Run-time Adaptation
of Grid Data Placement Jobs, 2003, section 4.1): "finds the maximum
memory-to-memory copy bandwidth and the block size to be used to achieve it".

How it measures: a source region is copied into a destination region of the
same size (default 64 MiB each, larger than any CPU cache, so the figure is
memory bandwidth, not cache bandwidth) in block-size slices; each slice
assignment between memoryviews is one memcpy plus the interpreter's per-call
cost, which is exactly what a Python transfer engine pays per buffer. Block
sizes are powers of two from 4 KiB to 16 MiB; the sweep runs in `rounds`
interleaved rounds and keeps each block size's best figure.

Runs on any python3 >= 3.8 with the standard library only; one self-contained
file (it is piped over SSH as `ssh host python3 - ARGS < memory.py`). Prints
exactly one JSON object on stdout.
"""

import argparse
import json
import os
import platform
import signal
import socket
import sys
import time

VERSION = 1
KIB = 1024
MIB = 1024 * 1024
MIN_BLOCK = 4 * KIB
MAX_BLOCK = 16 * MIB
TOLERANCE = 0.05


class Interrupted(BaseException):
    """Raised from a signal handler so the process stops cleanly."""


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
        "profiler": "memory",
        "version": VERSION,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _copy_pass(src: memoryview, dst: memoryview, block: int, nbytes: int) -> float:
    """Copy `nbytes` from src to dst in `block` slices, wrapping around the
    regions; return the seconds taken."""
    size = len(src)
    done = 0
    offset = 0
    start = time.perf_counter()
    while done < nbytes:
        end = offset + block
        dst[offset:end] = src[offset:end]
        done += block
        offset = 0 if end >= size else end
    return time.perf_counter() - start


def run(
    region: int = 64 * MIB,
    per_trial: int = 256 * MIB,
    rounds: int = 3,
    max_seconds: float = 10.0,
    verbose: bool = False,
) -> dict:
    """Measure copy bandwidth per block size; return the result dict (docs/profilers.md).

    region: size of each of the source and destination buffers. per_trial:
    bytes copied per block size and round. The sweep stops early, marked
    truncated, after max_seconds."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1 (got %r)" % rounds)
    if region < MIN_BLOCK or per_trial < MIN_BLOCK:
        raise ValueError("region and per_trial must be at least %d bytes" % MIN_BLOCK)
    clock = time.monotonic()
    result = _header()
    blocks = []
    size = MIN_BLOCK
    while size <= min(region, MAX_BLOCK):
        blocks.append(size)
        size *= 2
    # Whole blocks only, so every slice copies a full block.
    region = (region // blocks[-1]) * blocks[-1]
    src = memoryview(os.urandom(MIB) * (region // MIB) + os.urandom(region % MIB))
    dst = memoryview(bytearray(region))
    _copy_pass(src, dst, blocks[-1], region)  # fault the destination pages in first
    best = {}
    truncated = False
    for _round in range(rounds):
        for block in blocks:
            if time.monotonic() - clock > max_seconds and best:
                truncated = True
                break
            nbytes = max(block, (per_trial // block) * block)
            seconds = _copy_pass(src, dst, block, nbytes)
            mib_s = round(nbytes / MIB / max(seconds, 1e-9), 1)
            best[block] = max(best.get(block, 0.0), mib_s)
            if verbose:
                sys.stderr.write("memory: block %8d  copy %10.1f MiB/s\n" % (block, mib_s))
        if truncated:
            break
    if dst[:64] != src[:64]:
        raise RuntimeError("copy check failed: destination differs from source")
    best_block = max(sorted(best), key=lambda b: best[b])
    result.update(
        {
            "ok": True,
            "region_bytes": region,
            "per_trial_bytes": per_trial,
            "rounds": rounds,
            "block_sizes": blocks,
            "trials": [{"block": b, "mib_s": best[b]} for b in sorted(best)],
            "best_block": best_block,
            "best_mib_s": best[best_block],
            "within_5pct": [b for b in sorted(best) if best[b] >= best[best_block] * (1 - TOLERANCE)],
            "truncated": truncated,
            "seconds": round(time.monotonic() - clock, 3),
        }
    )
    return result


def _on_signal(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m profilers.memory",
        description="Memory profiler (paper 003 section 4.1): memory-to-memory copy bandwidth and the "
        "block size that reaches it. Prints one JSON object.",
    )
    parser.add_argument(
        "--region",
        type=parse_size,
        default=64 * MIB,
        help="size of the source and of the destination buffer (default 64M)",
    )
    parser.add_argument(
        "--per-trial", type=parse_size, default=256 * MIB, help="bytes copied per block size and round (default 256M)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, best kept (default 3)")
    parser.add_argument(
        "--max-seconds", type=float, default=10.0, help="stop the sweep early after this many seconds (default 10)"
    )
    parser.add_argument("--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    for name in ("SIGTERM", "SIGHUP"):
        if getattr(signal, name, None) is not None:
            signal.signal(getattr(signal, name), _on_signal)
    try:
        _emit(
            run(
                region=args.region,
                per_trial=args.per_trial,
                rounds=args.rounds,
                max_seconds=args.max_seconds,
                verbose=args.verbose,
            )
        )
        return 0
    except (KeyboardInterrupt, Interrupted) as exc:
        _emit(dict(_header(), ok=False, error="interrupted by %s" % (str(exc) or "SIGINT")))
        return 130
    except (MemoryError, ValueError, RuntimeError) as exc:
        message = "memory profiler failed: %s" % (exc or exc.__class__.__name__)
        if isinstance(exc, MemoryError):
            message += "; lower --region"
        sys.stderr.write(message + "\n")
        _emit(dict(_header(), ok=False, error=message))
        return 1


if __name__ == "__main__":
    sys.exit(main())
