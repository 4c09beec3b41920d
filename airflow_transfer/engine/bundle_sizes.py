"""How large a bundle's groups are: by bytes, by what a connection carries, and at the end.

Shared by uploads (engine/bundle.py) and downloads (engine/bundle_pull.py).
"""

from __future__ import annotations

GROUP_BYTES = 16 << 20  # bytes per commit: bounds the memory a group holds on both ends
# Fewest files a group takes towards the end of a chunk, when groups shrink to each worker's share
# of what is left so that every channel finishes at about the same time.
TAIL_GROUP_FILES = 16
# A group holds no more than its connection carries in this long (and never less than
# GROUP_MIN_BYTES): a connection whose window is small (still in slow start, or cut by an early
# loss) takes small groups and leaves the rest to the others. On wan50 `tiny` one such
# connection (its window held at 76 segments after a loss) carried the last 13 MiB alone for
# 1.1-1.4 s while two connections with 40 times its window sat idle.
GROUP_SECONDS = 0.5
GROUP_MIN_BYTES = 1 << 20


def group_bytes(rate: float | None) -> int:
    """The most bytes one group may hold on a connection that carries `rate` bytes per second
    (None: unknown, as an upload over an OpenSSH process)."""
    if rate is None:
        return GROUP_BYTES
    return int(min(GROUP_BYTES, max(GROUP_MIN_BYTES, rate * GROUP_SECONDS)))
