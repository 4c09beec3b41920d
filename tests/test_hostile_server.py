"""The real CLI against a hostile or buggy SFTP server (tests/support/hostile_sftp.py).

Invariants under every misbehaviour: nothing is written outside the destination
root, a hostile name is never followed, no run outlives its timeouts, errors are
one line (what, where, what to do) with a non-zero exit, and a file whose size
lies is never reported as verified. The server allows no exec, so listing and
verification take their SFTP-only paths.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.hostile_sftp import Behaviour, HostileSFTPServer

A_SIZE = 300_000  # two reads of OpenSSH's size: a stall can land between them
HANG_GUARD = 150  # seconds: far above any configured timeout below, only catches a hang


def _tree(path: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under `path` with its kind and content digest."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(path))
            if full.is_symlink() or full.is_dir():
                out[rel] = (0, b"")
            else:
                out[rel] = (1, hashlib.sha256(full.read_bytes()).digest())
    return out


class Scene:
    """A served tree, a destination root inside an otherwise watched parent, one CLI run."""

    def __init__(self, tmp_path: Path, behaviour: Behaviour) -> None:
        self.tmp = tmp_path
        self.served = tmp_path / "served"
        data = self.served / "data"
        (data / "sub").mkdir(parents=True)
        self.a = os.urandom(A_SIZE)
        (data / "a.bin").write_bytes(self.a)
        (data / "sub" / "b.txt").write_bytes(b"hi\n")
        self.parent = tmp_path / "dest-parent"
        self.parent.mkdir()
        (self.parent / "keep.txt").write_text("untouched\n")
        self.root = self.parent / "root"
        self.server = HostileSFTPServer(tmp_path / "keys", self.served, behaviour)
        self.before = None

    def copy(self, *extra: str, src: str = "/data"):
        self.before = {k: v for k, v in _tree(self.parent).items() if not k.startswith("root")}
        t0 = time.monotonic()
        run = run_cli(
            "copy",
            self.server.url(src),
            str(self.root),
            *self.server.cli_args(),
            "--json",
            "--restart",
            *extra,
            timeout=HANG_GUARD,
        )
        run.seconds = time.monotonic() - t0
        return run

    def assert_contained(self) -> None:
        after = {k: v for k, v in _tree(self.parent).items() if not k.startswith("root")}
        assert after == self.before, "something was written next to the destination root"
        leftovers = sorted(p for p in _tree(self.tmp) if "pwned" in p or "escape" in p)
        assert leftovers == []


def _clean_error(run) -> str:
    assert "Traceback" not in run.err, run.err
    errors = [line for line in run.err.splitlines() if line.startswith("airflow-transfer: error:")]
    assert len(errors) == 1, run.err
    return errors[0]


@pytest.fixture
def scene(tmp_path):
    made = []

    def make(behaviour: Behaviour) -> Scene:
        s = Scene(tmp_path, behaviour)
        s.server.start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.server.stop()


@pytest.mark.parametrize(
    "name, message",
    [
        # a directory entry never holds '/': these are refused before any path is joined
        ("../escape.txt", "with '/'"),
        ("ABS", "with '/'"),
        ("sub/escape.txt", "with '/'"),
        ("evil\nname", "control character"),
        ("nul\x00name", "control character"),
        ("esc\x1b[2Jname", "control character"),
    ],
)
def test_hostile_names_are_rejected_never_followed(scene, name, message):
    s = scene(Behaviour())
    if name == "ABS":
        name = str(s.tmp / "abs-pwned.txt")
    s.server.b.extra_names = {"/data": [name]}
    run = s.copy()
    assert run.code == 1, run.err
    line = _clean_error(run)
    assert message in line and "nothing outside the destination root is written" in line
    # never asked for, never written: not under the root, not next to it, not at the absolute path
    assert s.server.asked_for("escape") == [] and s.server.asked_for("pwned") == []
    assert [r for r in s.server.requests if r[0] == "open"] == []
    assert not (s.tmp / "abs-pwned.txt").exists()
    assert not s.root.exists() or _tree(s.root) == {}
    s.assert_contained()


def test_symlink_loop_reported_as_directories_is_listed_once(scene, tmp_path):
    s = scene(Behaviour(follow_links=True))
    os.symlink(".", s.served / "data" / "sub" / "loop")  # the server calls it a directory
    os.symlink("ring2", s.served / "data" / "ring1")  # a two-link loop: ELOOP, never a file
    os.symlink("ring1", s.served / "data" / "ring2")
    run = s.copy()
    assert run.code == 0, run.err
    assert sorted(_tree(s.root)) == ["a.bin", "sub", "sub/b.txt"]
    assert (s.root / "a.bin").read_bytes() == s.a
    assert run.summary["skipped_entries"]["symlinks"] >= 1
    assert run.summary["verify"]["verified"] == 2
    s.assert_contained()


def test_endless_directory_chain_stops_with_a_clear_error(scene):
    # realpath cannot tell the levels apart here: only the depth limit ends the walk
    s = scene(Behaviour(endless_dir="d" * 200))
    run = s.copy()
    assert run.code == 1, run.err
    line = _clean_error(run)
    assert "deeper than" in line and "symlink loop" in line
    assert not s.root.exists() or _tree(s.root) == {}
    s.assert_contained()


@pytest.mark.parametrize(
    "lie, error",
    [
        ({"size_lies": {"/data/a.bin": A_SIZE + 100_000}}, "shrank"),  # says more than it holds
        ({"size_lies": {"/data/a.bin": A_SIZE - 100_000}}, "more bytes than its listed size"),  # holds more
        ({"read_extra": 7}, "bytes for a"),  # answers a read with more than was asked for
    ],
)
def test_lying_sizes_are_never_verified(scene, lie, error):
    s = scene(Behaviour(**lie))
    run = s.copy("--retries", "2")
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    failed = {f["path"]: f["error"] for f in run.summary["failed"]}
    assert "a.bin" in failed and error in failed["a.bin"], failed
    assert "gave up after 2 attempts" in failed["a.bin"]
    assert not (s.root / "a.bin").exists()  # never under its final name
    expected_ok = 0 if "read_extra" in lie else 1  # b.txt is honest unless every read lies
    assert run.summary["verify"]["verified"] == expected_ok
    assert run.summary["verify"]["mismatched"] == 0
    s.assert_contained()


def test_short_reads_are_completed_and_verified_by_read_back(scene):
    s = scene(Behaviour(short_read=1000))
    run = s.copy()
    assert run.code == 0, run.err
    assert (s.root / "a.bin").read_bytes() == s.a
    assert (s.root / "sub" / "b.txt").read_bytes() == b"hi\n"
    v = run.summary["verify"]
    assert v["verified"] == 2 and v["where"] == "source read-back, destination local", v
    s.assert_contained()


@pytest.mark.parametrize(
    "stall",
    [
        {"stall_ops": {"list"}},  # the listing never answers
        {"stall_ops": {"open"}},  # no file ever opens
        {"partial_after_reads": 1},  # data stops in the middle of a.bin, inside a reply packet
        {
            "stall_after_reads": 5
        },  # every data read is answered (a.bin 2 + EOF probe, b.txt 1 + probe), the read-back stalls
    ],
)
def test_stalled_server_fails_within_the_stall_timeout(scene, stall):
    s = scene(Behaviour(**stall))
    run = s.copy("--stall-timeout", "1", "--retries", "2", "--concurrency", "1")
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    if "list" in stall.get("stall_ops", ()):
        line = _clean_error(run)
        assert "listing the source over SFTP failed" in line and "sent no reply for 1s" in line
    else:
        failed = {f["path"]: f["error"] for f in run.summary["failed"]}
        assert set(failed) == {"a.bin", "sub/b.txt"}, run.err
        assert all("sent no reply for 1s" in e and "--stall-timeout" in e for e in failed.values()), failed
        assert run.summary["verify"]["verified"] == 0 and run.summary["verify"]["mismatched"] == 0
    assert not (s.root / "a.bin").exists()
    s.assert_contained()


def test_upload_verified_by_read_back_without_exec(scene, tmp_path):
    s = scene(Behaviour(short_read=4096))
    (s.served / "up").mkdir()
    local = tmp_path / "local"
    (local / "d").mkdir(parents=True)
    body = os.urandom(200_000)
    (local / "d" / "x.bin").write_bytes(body)
    (local / "y.txt").write_bytes(b"y\n")
    run = run_cli("copy", str(local), s.server.url("/up/dest"), *s.server.cli_args(), "--json", timeout=HANG_GUARD)
    assert run.code == 0, run.err
    assert (s.served / "up" / "dest" / "d" / "x.bin").read_bytes() == body
    v = run.summary["verify"]
    assert v["where"] == "read-back" and v["verified"] == 2, v
    assert "runs no commands over SSH exec (SFTP only)" in v.get("why", ""), v


def test_upload_to_a_server_that_stalls_on_writes(scene, tmp_path):
    s = scene(Behaviour(stall_ops={"write"}))
    (s.served / "up").mkdir()
    local = tmp_path / "local"
    local.mkdir()
    (local / "x.bin").write_bytes(os.urandom(100_000))
    run = run_cli(
        "copy",
        str(local),
        s.server.url("/up/dest"),
        *s.server.cli_args(),
        "--json",
        "--stall-timeout",
        "1",
        "--retries",
        "2",
        timeout=HANG_GUARD,
    )
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    failed = {f["path"]: f["error"] for f in run.summary["failed"]}
    assert "sent no reply for 1s" in failed["x.bin"], failed
    assert not (s.served / "up" / "dest" / "x.bin").exists()


def test_upload_to_a_server_whose_reads_lie_is_never_verified(scene, tmp_path):
    # The written bytes are right, but the read-back (the only verification without exec) lies.
    s = scene(Behaviour(read_extra=5))
    (s.served / "up").mkdir()
    local = tmp_path / "local"
    local.mkdir()
    (local / "x.bin").write_bytes(os.urandom(50_000))
    run = run_cli(
        "copy",
        str(local),
        s.server.url("/up/dest"),
        *s.server.cli_args(),
        "--json",
        "--retries",
        "2",
        timeout=HANG_GUARD,
    )
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    assert run.summary["verify"]["verified"] == 0, run.summary["verify"]
    assert [f["path"] for f in run.summary["failed"]] == ["x.bin"], run.err
    assert not (s.served / "up" / "dest" / "x.bin").exists()  # never under its final name


@pytest.mark.parametrize("case", ["name", "endless", "loop", "stall"])
def test_generic_backend_path_is_as_strict(scene, case):
    """--replica reads through the generic backends (paramiko's SFTP client), not the engine:
    the same names, loops and stalls must end the same way there."""
    behaviour = {
        "name": Behaviour(extra_names={"/data": ["../escape.txt"]}),
        "endless": Behaviour(endless_dir="d" * 200),
        "loop": Behaviour(follow_links=True),
        "stall": Behaviour(stall_after_reads=0),
    }[case]
    s = scene(behaviour)
    if case == "loop":
        os.symlink(".", s.served / "data" / "sub" / "loop")
    # a short stall timeout only where the server stalls: a loaded CI machine must not trip it
    stall = ["--stall-timeout", "1"] if case == "stall" else []
    run = s.copy("--replica", s.server.url("/data"), *stall, "--retries", "2")
    assert "Traceback" not in run.err
    if case == "loop":
        assert run.code == 0, run.err
        assert sorted(_tree(s.root)) == ["a.bin", "sub", "sub/b.txt"]
    elif case == "stall":
        assert run.code == 1, run.err
        failed = {f["path"]: f["error"] for f in run.summary["failed"]}
        assert set(failed) == {"a.bin", "sub/b.txt"} and "stall timeout" in failed["a.bin"], failed
    else:
        assert run.code == 1, run.err
        line = _clean_error(run)
        assert ("with '/'" if case == "name" else "deeper than") in line
        assert s.server.asked_for("escape") == []
        assert not s.root.exists() or _tree(s.root) == {}
    s.assert_contained()
