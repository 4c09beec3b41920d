"""The block size search of the Stork tuner (paper 003 sections 3.2 and 4.3).

The disk profiler rates a best block size and an increment that can be added to
it at the same performance, per end and direction. The block must be at least
the TCP buffer and, since a transfer takes one block size for both ends, good
for the source's reads and the destination's writes: the smallest size both
ends' progressions (best + k x increment) reach, when there is one.
"""

from __future__ import annotations

import math

from .stork_facts import DiskFacts, ProtocolTraits
from .stork_rules import fmt_bytes

_MAX_BLOCK_CANDIDATES = 4096  # bound on the common-block search (pure function, must end)


def _smallest_at_least(disk: DiskFacts, floor: int) -> int | None:
    """Smallest best + k x increment (k >= 0) that is >= floor; None when no
    increment was measured and the best block is below the floor."""
    if disk.best_block >= floor:
        return disk.best_block
    if not disk.increment:
        return None
    steps = math.ceil((floor - disk.best_block) / disk.increment)
    return disk.best_block + steps * disk.increment


def _in_progression(value: int, disk: DiskFacts) -> bool:
    if value < disk.best_block:
        return False
    if value == disk.best_block:
        return True
    return bool(disk.increment) and (value - disk.best_block) % disk.increment == 0


def _common_block(a: DiskFacts, b: DiskFacts, floor: int) -> int | None:
    """Smallest size >= floor reachable from both ends' best block by their increments."""
    if not a.increment and b.increment:
        a, b = b, a
    start = _smallest_at_least(a, max(floor, b.best_block))
    if start is None:
        return None
    if not a.increment:
        return start if _in_progression(start, b) else None
    for k in range(_MAX_BLOCK_CANDIDATES):
        candidate = start + k * a.increment
        if _in_progression(candidate, b):
            return candidate
    return None


def decide_block_size(
    source_read: DiskFacts | None, dest_write: DiskFacts | None, tcp_buffer: int, traits: ProtocolTraits
) -> tuple[int, list[str]]:
    """Paper 003 section 4.3: block size >= TCP buffer, stepping by the disk
    profiler's increment, one size good for the source's reads and the
    destination's writes; then the protocol's own cap."""
    block, reasons = _block_for_disks(source_read, dest_write, tcp_buffer)
    if traits.max_block is not None and block > traits.max_block:
        reasons.append(
            f"{traits.name}: block capped at {fmt_bytes(traits.max_block)}"
            + (f" ({traits.note})" if traits.note else "")
            + "; pipelined requests keep the window full instead"
        )
        return traits.max_block, reasons
    return block, reasons


def _block_for_disks(
    source_read: DiskFacts | None, dest_write: DiskFacts | None, tcp_buffer: int
) -> tuple[int, list[str]]:
    ends = [(label, d) for label, d in (("source read", source_read), ("destination write", dest_write)) if d]
    if not ends:
        if not tcp_buffer:
            return 0, ["no disk profile and no TCP buffer: block size left to the backend (0)"]
        return tcp_buffer, [
            f"no disk profile: block size = TCP buffer {fmt_bytes(tcp_buffer)} "
            "(paper 003 section 4.3: at least the TCP buffer)"
        ]
    if source_read is None or dest_write is None:
        label, disk = ends[0]
        return _one_end(label, disk, tcp_buffer)
    common = _common_block(source_read, dest_write, tcp_buffer)
    if common is not None:
        return common, [
            f"block {fmt_bytes(common)}: the smallest size >= the TCP buffer "
            f"({fmt_bytes(tcp_buffer)}) that both the source read profile "
            f"({fmt_bytes(source_read.best_block)} + k x {fmt_bytes(source_read.increment)}) and the "
            f"destination write profile ({fmt_bytes(dest_write.best_block)} + k x "
            f"{fmt_bytes(dest_write.increment)}) rate as optimal (paper 003 sections 3.2, 4.3)"
        ]
    picks = [_one_end(label, disk, tcp_buffer) for label, disk in ends]
    block = max(pick[0] for pick in picks)
    return block, [
        f"no block size >= {fmt_bytes(tcp_buffer)} is optimal at both ends; using "
        f"{fmt_bytes(block)}, the larger of the two ends' choices"
    ] + [r for pick in picks for r in pick[1]]


def _one_end(label: str, disk: DiskFacts, tcp_buffer: int) -> tuple[int, list[str]]:
    if disk.best_block >= tcp_buffer:
        return disk.best_block, [
            f"block {fmt_bytes(disk.best_block)}: the {label} profile's best, already >= the TCP buffer"
        ]
    stepped = _smallest_at_least(disk, tcp_buffer)
    if stepped is None:
        return tcp_buffer, [
            f"block raised to the TCP buffer {fmt_bytes(tcp_buffer)}: the {label} profile's "
            f"best {fmt_bytes(disk.best_block)} is smaller and no increment was measured"
        ]
    return stepped, [
        f"block {fmt_bytes(stepped)}: {label} best {fmt_bytes(disk.best_block)} + increments of "
        f"{fmt_bytes(disk.increment)} until >= the TCP buffer {fmt_bytes(tcp_buffer)} "
        "(paper 003 section 4.3)"
    ]
