"""Creating a destination tree over SFTP (engine/remote_tree.py) against a real sshd."""

from __future__ import annotations

import pytest

from airflow_transfer.engine.remote_tree import make_dirs
from airflow_transfer.errors import TransferError
from airflow_transfer.protocols import sftp_wire as w
from airflow_transfer.protocols.pool import SFTPPool
from tests.support.sshd import chown_to_user


class _NotingWire(w.SFTPWire):
    """The real wire of a real connection, noting each request it sends ("S" for a STAT, with
    its path in `stats`) and each wait for replies ("P"); nothing it sends or reads changes."""

    events: list[str]
    stats: list[str]

    def send(self, ptype, payload, *args, **kw):
        self.events.append("S" if ptype == w.STAT else "o")
        if ptype == w.STAT:
            self.stats.append(bytes(payload[4:]).decode(errors="replace"))
        return super().send(ptype, payload, *args, **kw)

    def pump(self, *args, **kw):
        self.events.append("P")
        return super().pump(*args, **kw)


def _noting_pool(target) -> tuple[SFTPPool, list[str], list[str]]:
    """A pool whose connections' wires note what they do: (pool, events, STAT paths)."""
    pool = SFTPPool(target)
    events: list[str] = []
    stats: list[str] = []
    opened = pool._open

    def open_noting():
        conn = opened()
        conn.wire.__class__ = _NotingWire
        conn.wire.events, conn.wire.stats = events, stats
        return conn

    pool._open = open_noting  # type: ignore[method-assign]
    return pool, events, stats


def test_a_re_run_into_an_existing_tree_checks_its_directories_pipelined(sshd, remote_dir):
    """Every MKDIR of an existing directory fails; the STATs that tell "exists" from "cannot be
    made" go out together, not one round trip each (300 directories: 15 s at 50 ms)."""
    todo = [str(remote_dir / f"d{i:03d}") for i in range(300)]
    pool, events, _ = _noting_pool(sshd.target(look_for_keys=False))
    try:
        assert make_dirs(pool, todo, "test") == set(todo)  # all new: every one created
        events.clear()
        assert make_dirs(pool, todo, "test") == set()  # all there: none created, no error
        assert events.count("S") == 300 and "S" * 200 in "".join(events), "".join(events)[:400]
    finally:
        pool.close()


def test_a_directory_that_cannot_be_made_is_a_clear_error(sshd, remote_dir):
    (remote_dir / "plain").write_bytes(b"a file where a directory should be")
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        with pytest.raises(TransferError, match="cannot create destination directory") as info:
            make_dirs(pool, [str(remote_dir / "ok"), str(remote_dir / "plain")], "test")
        assert "plain" in str(info.value)
    finally:
        pool.close()


def test_a_new_destination_under_an_existing_parent_costs_no_stat(sshd, local_dir, remote_dir):
    """The root is made first; its parents are looked for only if that fails (mkdir -p)."""
    from airflow_transfer.engine.params import TransferParams
    from airflow_transfer.job import CopyRequest, run_copy
    from airflow_transfer.protocols.endpoint import Endpoint
    from tests.support.data import tree_digest, write_random

    src = local_dir / "few"
    for i in range(3):
        write_random(src / "sub" / f"f{i}.bin", 1000, seed=90 + i)
    target = sshd.target(look_for_keys=False)
    seen = []
    for dst in (remote_dir / "new", remote_dir / "p" / "q" / "deep"):
        pool, _, stats = _noting_pool(target)  # the session adopts it: every SFTP request is noted
        req = CopyRequest(
            Endpoint("file", str(src)), Endpoint("sftp", str(dst), target), TransferParams(cc=1), use_store=False
        )
        req.pool = pool
        s = run_copy(req)
        assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)
        seen.append([p.rsplit("/", 1)[-1] for p in stats])
    assert seen[0] == ["new"], seen  # made at once: only its own STAT, sent with its MKDIR
    assert {"q", "p"} <= set(seen[1]), seen  # making it failed: its missing parents were looked for


def _one_wait(events: list[str]) -> bool:
    """Every request went out before the first wait for replies: one round trip."""
    first = events.index("P")
    return all(e == "P" for e in events[first:])


def test_a_new_tree_of_several_depths_is_made_in_one_round_trip(sshd, remote_dir):
    root = remote_dir / "tree"
    todo = [str(p) for p in (root, root / "a", root / "x", root / "a" / "b", root / "a" / "b" / "c")]
    pool, events, stats = _noting_pool(sshd.target(look_for_keys=False))
    try:
        assert make_dirs(pool, todo, "test") == set(todo)
        assert events[:5] == ["o"] * 5 and _one_wait(events), "".join(events)
        assert stats == [] and (root / "a" / "b" / "c").is_dir() and (root / "x").is_dir()
    finally:
        pool.close()


def test_the_roots_stat_rides_with_its_mkdir(sshd, remote_dir):
    """A destination root that exists (the usual case) costs no round trip of its own."""
    root = remote_dir / "there"
    root.mkdir()
    chown_to_user(root, sshd.user)
    pool, events, stats = _noting_pool(sshd.target(look_for_keys=False))
    try:
        assert make_dirs(pool, [str(root), str(root / "new")], "test", stat_first=True) == {str(root / "new")}
        assert stats == [str(root)] and _one_wait(events), "".join(events)
    finally:
        pool.close()


def test_children_refused_before_their_parents_are_made_level_by_level(sshd, remote_dir):
    """Children first, as a server that does not answer in order may run them: the real sshd
    refuses each child before its parent exists; each is made again, level by level."""
    root = remote_dir / "out-of-order"
    todo = [str(p) for p in (root, root / "a", root / "a" / "b")][::-1]
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        assert make_dirs(pool, todo, "test") == set(todo)
        assert (root / "a" / "b").is_dir()
    finally:
        pool.close()
