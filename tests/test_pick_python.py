"""scripts/pick-python.sh: the venv's interpreter is chosen by speed, not by PATH order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pick-python.sh"


def _pick(*candidates: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *candidates], capture_output=True, text=True, timeout=120)


def _slowed(tmp_path: Path) -> str:
    # The same interpreter with every allocation traced: several times slower on the probe.
    slow = tmp_path / "python3.11-slow"
    slow.write_text(f'#!/bin/sh\nexec {sys.executable} -X tracemalloc=1 "$@"\n')
    slow.chmod(0o755)
    return str(slow)


def test_the_faster_interpreter_wins_whichever_comes_first(tmp_path: Path) -> None:
    slow = _slowed(tmp_path)
    for order in ((slow, sys.executable), (sys.executable, slow)):
        done = _pick(*order)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == sys.executable
        assert f"pick-python: {slow}:" in done.stderr  # both were measured
        assert f"pick-python: {sys.executable}:" in done.stderr


def test_candidates_that_are_not_python_3_11_are_passed_over(tmp_path: Path) -> None:
    other = tmp_path / "python3.11-other"
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    done = _pick(str(other), str(tmp_path / "missing"), sys.executable)
    assert done.stdout.strip() == sys.executable
    assert str(other) not in done.stderr
    assert _pick(str(other)).stdout == ""
