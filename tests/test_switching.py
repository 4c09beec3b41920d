"""The copy's shorter switch interval (engine/switching.py): set for the copy, put back after."""

from __future__ import annotations

import sys

import pytest

import airflow_transfer.job as job
from airflow_transfer.engine.switching import SWITCH_INTERVAL_S, quick_switching
from tests.support.data import tree_digest
from tests.test_bundle import _copy, _tree


def test_the_block_runs_with_the_short_interval_and_the_callers_comes_back():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        with quick_switching():
            assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() == pytest.approx(0.005)
        sys.setswitchinterval(0.0001)  # a caller that asked for shorter keeps it
        with quick_switching():
            assert sys.getswitchinterval() == pytest.approx(0.0001)
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(before)


def test_a_copy_runs_its_threads_under_it_and_the_caller_gets_its_own_back(sshd, local_dir, remote_dir, monkeypatch):
    seen: list[float] = []
    real = job._run

    def watching(*args, **kwargs):
        seen.append(sys.getswitchinterval())
        return real(*args, **kwargs)

    monkeypatch.setattr(job, "_run", watching)
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        src = _tree(local_dir / "switching", 40, seed=51)
        s = _copy(sshd, src, remote_dir / "switching")
        assert s["failed"] == [] and tree_digest(remote_dir / "switching") == tree_digest(src)
        assert seen == [pytest.approx(SWITCH_INTERVAL_S)]
        assert sys.getswitchinterval() == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(before)
