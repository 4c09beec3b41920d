"""benchmarks/repeat_copies.py: the level each copy left in the tuning library, read from its summary."""

from __future__ import annotations

import pytest

from airflow_transfer.tuning.library import kept_note
from benchmarks.repeat_copies import _summary, kept_cc, parse_noise


def test_the_level_kept_is_read_from_the_note_the_copy_wrote() -> None:
    notes = ["auto chose first-contact: ...", kept_note(27, 2.222, 75.45, 16)]
    assert kept_cc(notes) == 16
    assert kept_cc(["first contact: start at cc 2 (where the last copy over this link settled)"]) is None


def test_the_medians_leave_out_the_first_contact() -> None:
    rows = [
        {"seconds": 30.0, "machine_cpu_s": 50.0, "kept_cc": 4},
        {"seconds": 10.0, "machine_cpu_s": 20.0, "kept_cc": 8},
        {"seconds": 14.0, "machine_cpu_s": 22.0, "kept_cc": 16},
    ]
    summary = _summary(rows)
    assert summary["kept_cc"] == [4, 8, 16]
    assert summary["median_seconds_after_first"] == 12.0 and summary["median_machine_cpu_s_after_first"] == 21.0


def test_noise_is_given_as_busy_and_idle_seconds() -> None:
    assert parse_noise("3/2.5") == (3.0, 2.5)
    for bad in ("3", "3/0", "a/b", "-1/2"):
        with pytest.raises(SystemExit, match="--noise"):
            parse_noise(bad)
