"""Interoperability, CI subset of `make interop` (benchmarks/interop.py): real servers, real CLI.

rclone serve sftp (no VFS cache: short reads, writes only in order, no exec but a bare
md5sum) and OpenSSH with ForceCommand internal-sftp + ChrootDirectory (no exec at all,
the usual HPC site). Cells, each with its own store, judged by the harness's cell
function: exit status 0 and the destination byte-identical to the dataset (sha256 of
every file on both sides, no temporary file left). Timing is not asserted beyond the
cell's cap, which only catches a hung run.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from benchmarks.interop import MIB, Scenario, make_dataset, place_dataset, run_cell
from tests.support.interop_servers import make_server

CAP_S = 120.0  # a hung run fails its cell; generous for a loaded 2-core machine
CELLS = [
    Scenario("upload", "p4", kill=False),
    Scenario("upload", "defaults", kill=True),  # the re-run once hung in block verification's reconnects
    Scenario("upload", "verify-md5", kill=False),
    Scenario("download", "defaults", kill=True),
    Scenario("download", "verify-none", kill=True),
    Scenario("upload", "verify-none", kill=True),
]
SERVERS = ["rclone", "forcecommand"]


@pytest.fixture(scope="module")
def interop(test_base: Path):
    work = test_base / "interop"
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    # 40 files: one empty, three of 8-12 MiB (split into 2-3 ranges by -p 4), the rest small.
    dataset = make_dataset(work / "dataset", count=40, big=[8 * MIB + 4321, 10 * MIB, 12 * MIB], seed=7)
    started = {}

    def server(name: str):
        if name not in started:
            s = make_server(name, work / "servers" / name)
            started[name] = s
            place_dataset(s, dataset, "source")  # before start: rclone caches directory listings
            s.start()
        return started[name]

    yield work, dataset, server
    for s in started.values():
        s.stop()
        s.cleanup()


@pytest.mark.parametrize("scenario", CELLS, ids=lambda s: s.name)
@pytest.mark.parametrize("server_name", SERVERS)
def test_interop_cell(interop, server_name: str, scenario: Scenario, record_property) -> None:
    work, dataset, server = interop
    rec = run_cell(server(server_name), scenario, dataset, work, "source", cap=CAP_S)
    first = rec.get("first_run") or {}
    if first:
        record_property("kill", first.get("note", ""))
        if not first.get("killed"):
            # Still a valid cell (the re-run must then skip everything), but not the one intended.
            warnings.warn(f"{server_name} {scenario.name}: {first.get('note')}", stacklevel=1)
    detail = (
        f"{server_name} {scenario.name}: exit {rec.get('exit')}, timed out {rec.get('timed_out')}, "
        f"{rec.get('seconds')} s, first run: {first.get('note', '-')}; "
        + "; ".join(rec.get("examples", []) + rec.get("error", []))
    )
    assert not first.get("timed_out"), detail
    assert not rec.get("timed_out"), detail
    assert rec["exit"] == 0, detail
    assert rec["identical"], detail
    if scenario.mode == "verify-md5" and server_name == "rclone":
        # rclone has no shell and no python3, but answers a bare `md5sum PATH`: used, and said.
        assert rec["verify_where"] == "coreutils", detail
        assert "bare md5sum" in rec["verify_why"], rec["verify_why"]
        assert rec["server_caps"]["exec"] == "bare", rec["server_caps"]
    if scenario.mode == "verify-md5" and server_name == "forcecommand":
        # Every exec runs internal-sftp: the reason is that, not a missing python3 or coreutils.
        assert rec["verify_where"] == "read-back", detail
        assert "runs no command of ours over SSH exec" in rec["verify_why"], rec["verify_why"]
        assert "coreutils" not in rec["verify_why"] and "helper unavailable" not in rec["verify_why"], rec["verify_why"]
