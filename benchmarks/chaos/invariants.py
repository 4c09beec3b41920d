"""The invariants a chaos run checks, as plain functions over a source tree, a
destination tree and a journal. Each returns a list of violations (empty: held).

- destination: every file under its final name is one of the source's files and
  byte-identical to it (absent is allowed until the final successful run);
- complete: after the final successful run every source file is there, identical,
  and no temporary file (airflow_transfer.paths.TEMP_SUFFIX) remains;
- journal: every file the store marks `done` exists at the destination, identical.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from airflow_transfer.paths import TEMP_SUFFIX


@dataclass(frozen=True)
class Violation:
    kind: str  # corrupted | stray | lost | leftover | journal
    path: str
    detail: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "detail": self.detail}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digests(root: Path) -> dict[str, tuple[int, str]]:
    """relative path -> (size, sha256) of every regular file under root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = Path(d) / n
            out[os.path.relpath(p, root)] = (p.stat().st_size, sha256_file(p))
    return out


def is_temp(rel: str) -> bool:
    return os.path.basename(rel).startswith(".") and rel.endswith(TEMP_SUFFIX)


def _walk(root: Path) -> tuple[list[str], list[str]]:
    finals, temps = [], []
    if not root.exists():
        return finals, temps
    for d, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root)
            (temps if is_temp(rel) else finals).append(rel)
    return sorted(finals), sorted(temps)


def _identical(path: Path, want: tuple[int, str]) -> bool:
    try:
        return path.stat().st_size == want[0] and sha256_file(path) == want[1]
    except OSError:
        return False


def check_destination(source: dict[str, tuple[int, str]], dst: Path) -> tuple[list[Violation], set[str]]:
    """(violations, identical final files) after any attempt, failed or not."""
    finals, _ = _walk(dst)
    bad, good = [], set()
    for rel in finals:
        want = source.get(rel)
        if want is None:
            bad.append(Violation("stray", rel, "a file under a final name that the source does not have"))
        elif _identical(dst / rel, want):
            good.add(rel)
        else:
            size = (dst / rel).stat().st_size
            bad.append(
                Violation(
                    "corrupted", rel, f"differs from the source under its final name ({size} bytes, source {want[0]})"
                )
            )
    return bad, good


def check_complete(source: dict[str, tuple[int, str]], dst: Path, good: set[str]) -> list[Violation]:
    """After the final successful run: nothing missing, no temporary file left."""
    _, temps = _walk(dst)
    out = [
        Violation("lost", rel, "missing (or not identical) after the final successful run")
        for rel in sorted(set(source) - good)
    ]
    out += [Violation("leftover", rel, "temporary file left after the final successful run") for rel in temps]
    return out


def journal_done(store_url: str, key: str) -> tuple[str | None, set[str]]:
    """(state of the transfer, files marked done) from the store; (None, set()) when not journaled yet."""
    from airflow_transfer.store import Store

    store = Store.open(store_url)
    try:
        record = next((t for t in store.list_transfers(limit=1000) if t.key == key), None)
        if record is None:
            return None, set()
        states = store.file_states(record.id)
        done = {p for p, s in zip(states["path"].to_pylist(), states["state"].to_pylist()) if s == "done"}
        return record.state, done
    finally:
        store.close()


def check_journal(done: set[str], good: set[str]) -> list[Violation]:
    """Every file journaled done is at the destination, identical."""
    return [
        Violation("journal", rel, "journaled done but absent or not identical at the destination")
        for rel in sorted(done - good)
    ]
