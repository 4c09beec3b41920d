"""Questions about a whole tree asked of an SFTP server pipelined, and the verification account.

Creating a chunk's directories and checking which files are already there
cost one round trip per directory depth and per 256 files, not one per
entry: on a 50 ms link that is what makes a re-run of a large tree cheap.
"""

from __future__ import annotations

import posixpath
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from ..errors import TransferError, describe_oserror
from ..protocols import sftp_wire as w
from ..protocols.pool import SFTPPool
from ..protocols.sftp_wire import Attrs
from .sftp_jobs import FileTask

if TYPE_CHECKING:
    from .transfer import TransferSession

STAT_WINDOW = 256  # LSTAT requests in flight at once


class MkdirFailed(TransferError):
    """A destination directory could not be made (and is not there): the SFTP server said so."""


def make_dirs(pool: SFTPPool, todo: list[str], host: str, *, stat_first: bool = False) -> set[str]:
    """Create `todo`; an existing directory is fine. Returns those this call created (their
    MKDIR succeeded: they were not there).

    Every MKDIR goes out in one batch, in the order given: parents first, a server that answers
    requests in order (OpenSSH's sftp-server does) makes a whole new tree in one round trip
    instead of one per depth. With `stat_first`, the first directory's STAT goes in the same
    batch: a destination root that is there already (the usual case) is then known to be a
    directory without a round trip of its own. Each other refused MKDIR is followed by a STAT
    (pipelined); one whose parent was in the batch and that is still missing is tried again level
    by level (its MKDIR may have run before its parent's). Only a directory missing after that
    is an error."""
    conn = pool.acquire()
    try:
        wire = conn.wire
        created: set[str] = set()
        dirs: set[str] = set()  # STAT said: a directory is there
        failures = _mkdir_batch(wire, todo, created)
        first = todo[0] if stat_first and todo else None
        if first is not None:
            _send_stat(wire, first, dirs)
        _drain(wire)
        # mkdir fails on existing directories too: only a missing directory is an error. The
        # STATs are pipelined: a re-run into a tree of 1,000 directories asks about all of them,
        # and one round trip each took 50 s at 50 ms.
        _stat_batch(wire, sorted(d for d in failures if d != first), dirs)
        wanted = set(todo)
        by_depth: dict[int, list[str]] = {}
        for d in todo:
            if d in failures and d not in dirs and posixpath.dirname(d) in wanted:
                by_depth.setdefault(d.count("/"), []).append(d)
        for depth in sorted(by_depth):
            level = by_depth[depth]
            for d in level:
                del failures[d]
            failed = _mkdir_batch(wire, level, created)
            _drain(wire)
            failures.update(failed)
            _stat_batch(wire, sorted(failed), dirs)
        for d in todo:
            if d in failures and d not in dirs:
                raise MkdirFailed(
                    f"cannot create destination directory: {describe_oserror(failures[d])}",
                    f"{host}:{d}",
                    "check the destination path and its permissions",
                )
    finally:
        pool.release(conn)
    return created


def _mkdir_batch(wire: w.SFTPWire, paths: list[str], created: set[str]) -> dict[str, OSError]:
    """Send a MKDIR for each of `paths`, in order; the refusals, once their replies are pumped."""
    failures: dict[str, OSError] = {}
    for d in paths:

        def on_reply(t: int, r: Any, d: str = d) -> None:
            try:
                wire.expect_status(t, r, d)
                created.add(d)
            except OSError as exc:
                failures[d] = exc

        wire.send(w.MKDIR, wire.p_path(d) + Attrs(mode=0o755).pack(), on_reply)
    return failures


def _send_stat(wire: w.SFTPWire, d: str, dirs: set[str]) -> None:
    """Send a STAT of `d`; `d` joins `dirs` once the reply says it is a directory."""

    def on_attrs(ptype: int, r: Any) -> None:
        if ptype == w.ATTRS and r.attrs().is_dir:
            dirs.add(d)

    wire.send(w.STAT, wire.p_path(d), on_attrs)


def _stat_batch(wire: w.SFTPWire, paths: list[str], dirs: set[str]) -> None:
    """STAT `paths`, STAT_WINDOW at a time, and wait for the replies."""
    for lo in range(0, len(paths), STAT_WINDOW):
        for d in paths[lo : lo + STAT_WINDOW]:
            _send_stat(wire, d, dirs)
        _drain(wire)


def _drain(wire: w.SFTPWire) -> None:
    while wire.outstanding:
        wire.pump(block=True)


def missing_parents(pool: SFTPPool, root: str) -> list[str]:
    """The ancestors of `root` that do not exist, outermost first: one STAT when the parent is
    there (the usual case), one more per missing level."""
    missing: list[str] = []
    conn = pool.acquire()
    try:
        parent = posixpath.dirname(root.rstrip("/"))
        while parent and parent not in ("/", "."):
            try:
                conn.wire.stat(parent)
                break
            except FileNotFoundError:
                missing.append(parent)
                parent = posixpath.dirname(parent)
            except OSError:
                break  # not ours to judge (no permission to stat): MKDIR of the root will say
    finally:
        pool.release(conn)
    return missing[::-1]


def same_size_and_mtime(pool: SFTPPool, tasks: list[FileTask]) -> set[int]:
    """Indices of files whose destination is a regular file of the same size and mtime."""
    done: set[int] = set()
    conn = pool.acquire()
    try:
        wire = conn.wire
        for lo in range(0, len(tasks), STAT_WINDOW):
            for i in range(lo, min(lo + STAT_WINDOW, len(tasks))):

                def on_attrs(ptype: int, r: Any, i: int = i) -> None:
                    if ptype == w.ATTRS:
                        a = r.attrs()
                        t = tasks[i]
                        if a.is_reg and a.size == t.size and a.mtime == int(t.mtime):
                            done.add(i)

                wire.send(w.LSTAT, wire.p_path(tasks[i].dst), on_attrs)
            while wire.outstanding:
                wire.pump(block=True)
    finally:
        pool.release(conn)
    return done


def verify_account(s: TransferSession, every: list[Any]) -> dict:
    """The summary's `verify` object from a session's verifiers (its siblings' too, under
    Multi-Chunk): what was checked, where, and in block mode how the threads were balanced."""
    if s.verify is None:
        return {"algorithm": "none", "mode": "none", "where": "none", "verified": 0, "repaired": 0, "mismatched": 0}
    v = every[0] if every else None
    where = v.dest.where if v else "none"
    if v is not None and v.src is not None:
        where = f"source {v.src.where}, destination {v.dest.where}"
    out: dict[str, Any] = {
        "algorithm": s.verify,
        "mode": s.verify_mode,
        "where": where,
        "verified": sum(x.stats.verified for x in every),
        "repaired": sum(x.stats.repaired for x in every),
        "mismatched": sum(x.stats.mismatched for x in every),
    }
    if v is not None and getattr(v, "block_mode", False):
        out.update(_block_account(s, v, every))
    b = s.bundle
    if b.files:
        # Verified on the destination, after the group was made durable: by the bundle sink there
        # (uploads), or here against the digest the helper took at the source as it read (downloads).
        side = "bundle sink" if s.direction == "upload" else "bundle helper digests at the source, checked here"
        sink = f"{side} ({b.files} small files in {b.groups} bundles, read back from disk)"
        out["where"] = f"{out['where']}; {sink}" if out["verified"] or out["mismatched"] else sink
        for key in ("verified", "mismatched", "repaired"):
            out[key] += getattr(b, key)
        out["bundled_files"] = b.files
    reasons = [s.verify_why] if s.verify_why else []
    reasons += [d.reason for d in ((v.dest, v.src) if v else ()) if d is not None and d.reason]
    if reasons:
        out["why"] = "; ".join(reasons)
    return out


def _block_account(s: TransferSession, v: Any, every: list[Any]) -> dict[str, Any]:
    b = _sum_bstats([x.bstats for x in every])
    # What the thread count was balanced from (t: 0 when the link's bandwidth is unknown).
    balance = {"t_block_s": round(s.block_t, 6), "c_block_s": round(s.block_c, 6)}
    measured = v.balance()  # t and c per block as measured during the run
    if measured is not None:
        balance["t_block_measured_s"] = round(measured[0], 6)
        balance["c_block_measured_s"] = round(measured[1], 6)
    blocks = {k: getattr(b, k) for k in ("verified", "mismatched", "resent", "bytes_resent", "from_journal")}
    return {
        "block_size": v.block_size,
        "threads": max(x.threads for x in every),
        "balance": balance,
        "blocks": blocks,
    }


def _sum_bstats(all_stats: list[Any]) -> Any:
    """Block counts of several verifiers added up (siblings' verifiers under Multi-Chunk)."""
    if len(all_stats) == 1:
        return all_stats[0]
    first = all_stats[0]
    return replace(first, **{f.name: sum(getattr(b, f.name) for b in all_stats) for f in fields(first)})
