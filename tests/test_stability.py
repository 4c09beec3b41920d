"""DatasetStableSensor's shared logic: tree fingerprints and the stable-for window (no Airflow)."""

from __future__ import annotations

import os

import pytest

from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.stability import StableWatch, TreeState, tree_state
from tests.support.data import make_tree


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_watch_needs_the_same_state_for_the_whole_window():
    clock = Clock()
    watch = StableWatch(10, clock=clock)
    a, b = TreeState("a", 1, 10), TreeState("b", 1, 20)
    assert not watch.observe(a)
    clock.now = 9
    assert not watch.observe(a)
    clock.now = 12
    assert not watch.observe(b)  # changed: the window starts again
    clock.now = 21
    assert not watch.observe(b)
    clock.now = 22
    assert watch.observe(b) and watch.changes == 1


def test_zero_window_is_the_first_look():
    assert StableWatch(0).observe(TreeState("x", 0, 0))


@pytest.mark.parametrize("bad", [-1, "10", None, True])
def test_bad_window_is_refused(bad):
    with pytest.raises(ValueError, match="stable_for"):
        StableWatch(bad)


def test_fingerprint_follows_sizes_mtimes_names_and_empty_dirs(local_dir):
    root = make_tree(local_dir / "t", small=10, seed=5)
    ep = Endpoint("file", str(root))
    first = tree_state(ep)
    assert tree_state(ep) == first and first.files == 12
    victim = root / "d1" / "e1" / "f0001.dat"
    st = victim.stat()
    with open(victim, "ab") as f:
        f.write(b"x")
    grown = tree_state(ep)
    assert grown.fingerprint != first.fingerprint and grown.bytes == first.bytes + 1
    os.utime(victim, (st.st_atime, st.st_mtime + 5))
    assert tree_state(ep).fingerprint != grown.fingerprint
    before = tree_state(ep)
    (root / "new_empty").mkdir()
    assert tree_state(ep).fingerprint != before.fingerprint
