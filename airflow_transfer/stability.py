"""Has a tree stopped changing? Shared by DatasetStableSensor's poke and its trigger.

A tree is listed (on SFTP hosts by the stdlib lister over one SSH exec, the
same as a manifest) and reduced to a fingerprint of every file's path, size
and mtime plus its empty directories. The tree is stable once the same
fingerprint has been seen for `stable_for` seconds: an instrument still
writing changes a size or an mtime between two looks, a finished run does not.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from . import manifest_schema as ms
from .chunked import list_tree
from .protocols.endpoint import Endpoint


@dataclass(frozen=True)
class TreeState:
    fingerprint: str
    files: int
    bytes: int

    def as_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "files": self.files, "bytes": self.bytes}


def tree_state(src: Endpoint) -> TreeState:
    """List `src` once and fingerprint it (order-independent, vectorised)."""
    m = list_tree(src)
    table = m.table
    if table.num_rows:
        table = table.take(pc.sort_indices(table, sort_keys=[(ms.PATH, "ascending")]))
    h = hashlib.sha256()
    for name in (ms.PATH, ms.SIZE, ms.MTIME):
        col = table[name].combine_chunks() if table.num_rows else pa.array([], table.schema.field(name).type)
        for buf in col.buffers():
            if buf is not None:
                h.update(buf)
    h.update(json.dumps(sorted(m.empty_dirs)).encode())
    return TreeState(h.hexdigest(), m.files, m.bytes)


class StableWatch:
    """Feed it successive TreeStates; it says when one has held for `stable_for` seconds."""

    def __init__(self, stable_for: float, clock=time.monotonic) -> None:
        if isinstance(stable_for, bool) or not isinstance(stable_for, (int, float)) or stable_for < 0:
            raise ValueError(f"stable_for must be a number of seconds >= 0 (got {stable_for!r})")
        self.stable_for = float(stable_for)
        self.clock = clock
        self.state: TreeState | None = None
        self.since: float | None = None
        self.changes = 0  # how often the tree changed while watched

    def observe(self, state: TreeState) -> bool:
        now = self.clock()
        if self.state is None or state.fingerprint != self.state.fingerprint:
            if self.state is not None:
                self.changes += 1
            self.state, self.since = state, now
        return now - self.since >= self.stable_for

    def held_for(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since
