"""Multi-Chunk's channels in all on a path whose BDP one channel's window covers (tuning/multichunk.py).

There, when every chunk fills a channel by itself (bundles, or Large and Huge chunks of files
of at least four BDPs), MC runs on bundle_channels' count in all instead of its eight; a chunk
sent file by file over SFTP, a path that needs several windows, or bundles that stop mid-copy
give the eight back. Named scenarios in memory first (the core count given), then the real
engine over a real sshd, uploads and downloads.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.tuning import LinkInfo, multichunk
from airflow_transfer.tuning.chunks import make_spec
from airflow_transfer.tuning.dataset import SortedSizes
from airflow_transfer.tuning.multichunk import MultiChunk, channel_budget
from tests.support.bundling_sim import BundlingSim, StopsBundling, size_table
from tests.support.data import temp_files, tree_digest, write_random

KIB, MIB = 1024, 1024 * 1024
BUNDLED = MIB  # what the engine bundles: files up to 1 MiB
WINDOW = 2 * MIB  # OpenSSH's channel window
LAN, WAN50 = (0.001, 1e9), (0.05, 5e8)  # BDP 125 KB under one window; 3.1 MB over it


def _link(rtt: float, rate: float, source: str = "profiler") -> LinkInfo:
    return LinkInfo(rtt_s=rtt, bandwidth_bps=rate, source=source, channel_window_bytes=WINDOW)


def _spec(name: str, sizes: list[int]):
    s = SortedSizes.of(np.sort(np.asarray(sizes, dtype=np.int64)))
    return make_spec(s, f"mc.{name}", 0, len(sizes), TransferParams(pp=2, p=1, cc=1))


SMALL = ("small", [8 * KIB] * 500)
MIDDLE = ("middle", [64 * KIB] * 200)
LARGE = ("large", [1 * MIB] * 300)  # 8 BDPs on lan
HUGE = ("huge", [3 * MIB] * 400)
SHORT_LARGE = ("large", [300 * KIB] * 300)  # above the BDP but under four of them

# (name, link, chunks, bundled up to, cores, channels in all out of 8)
SCENARIOS = [
    ("lan, every chunk bundled or big: the window's one plus one", LAN, [SMALL, MIDDLE, LARGE, HUGE], BUNDLED, 2, 2),
    ("lan, 1 core: still two", LAN, [SMALL, HUGE], BUNDLED, 1, 2),
    ("lan, 6 cores: one per core", LAN, [SMALL, MIDDLE, LARGE, HUGE], BUNDLED, 6, 6),
    ("lan, 16 cores: never more than the eight asked for", LAN, [SMALL, HUGE], BUNDLED, 16, 8),
    ("lan, big files only, no bundles needed", LAN, [LARGE, HUGE], 0, 2, 2),
    ("lan, bundles off: small files hide round trips with channels", LAN, [SMALL, MIDDLE, LARGE, HUGE], 0, 2, 8),
    ("lan, bundles off, large files of under four BDPs", LAN, [SHORT_LARGE, HUGE], 0, 2, 8),
    ("lan, the same files bundled", LAN, [SHORT_LARGE, HUGE], BUNDLED, 2, 2),
    ("wan50: the BDP needs two windows", WAN50, [SMALL, MIDDLE, LARGE, HUGE], BUNDLED, 2, 8),
]


@pytest.mark.parametrize("name,where,chunks,bundled,cores,want", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_channel_budget_scenarios(name, where, chunks, bundled, cores, want):
    specs = [_spec(n, sizes) for n, sizes in chunks]
    assert channel_budget(specs, _link(*where), 8, bundled, cores=cores) == want


def test_no_budget_without_a_measured_link_or_a_window():
    specs = [_spec(*HUGE)]
    assert channel_budget(specs, _link(*LAN, source="unknown"), 8, BUNDLED, cores=2) == 8
    no_window = LinkInfo(rtt_s=0.001, bandwidth_bps=1e9, source="profiler")  # a protocol without its own window
    assert channel_budget(specs, no_window, 8, BUNDLED, cores=2) == 8
    assert channel_budget([], _link(*LAN), 8, BUNDLED, cores=2) == 8


def _mixed_sizes() -> list[int]:
    return [8 * KIB] * 500 + [64 * KIB] * 200 + [1 * MIB] * 300 + [3 * MIB] * 400


def _run_on_lan(monkeypatch, sim: type[BundlingSim], bundled: int) -> tuple[MultiChunk, list]:
    """MC with its eight channels over the mixed sizes on the simulated LAN, 2 cores held;
    every file accounted for."""
    monkeypatch.setattr(multichunk, "host_cores", lambda: 2)
    link = _link(*LAN)
    sizes = _mixed_sizes()
    mc = MultiChunk(channels=8)
    results = mc.run(size_table(sizes), link, sim(link, bundled))
    assert sum(r.files for r in results) == len(sizes)
    return mc, results


@pytest.mark.parametrize("bundled", [BUNDLED, 0])
def test_mc_on_a_lan_holds_two_channels_in_all_while_every_chunk_fills_one(monkeypatch, bundled):
    mc, results = _run_on_lan(monkeypatch, BundlingSim, bundled)
    assert {r.chunk_id for r in results} == {"mc.small", "mc.middle", "mc.large", "mc.huge"}
    starts = [n for at, _, n in mc.last_moves if at == 0.0]
    if bundled:
        assert sum(starts) == 2 and max(n for _, _, n in mc.last_moves) <= 2, mc.last_moves
        assert any("2 of 8 channels in all" in n for n in mc.notes), mc.notes
    else:
        assert sum(starts) == 8, mc.last_moves
        assert not any("channels in all" in n for n in mc.notes), mc.notes


def test_when_bundles_stop_the_budget_is_lifted(monkeypatch):
    mc, _ = _run_on_lan(monkeypatch, StopsBundling, BUNDLED)
    assert sum(n for at, _, n in mc.last_moves if at == 0.0) == 2, mc.last_moves  # the budget at the start
    assert max(n for _, _, n in mc.last_moves) > 2, mc.last_moves  # lifted once bundles stopped
    assert any("bundles stopped" in n for n in mc.notes), mc.notes


@pytest.fixture(scope="module")
def lan_mixed(tmp_path_factory):
    """Bundled small and middle files, and Large and Huge ones of at least four BDPs of a LAN."""
    root = tmp_path_factory.mktemp("mclan") / "mixed"
    for i in range(40):
        write_random(root / "small" / f"s{i:03d}.dat", 1000 + 150 * i, seed=i)
    for i in range(20):
        write_random(root / "middle" / f"m{i:02d}.dat", 20_000 + 2500 * i, seed=100 + i)
    for i in range(4):
        write_random(root / "large" / f"l{i}.bin", 600_000 + 200_000 * i, seed=200 + i)
    for i in range(6):
        write_random(root / "huge" / f"h{i:02d}.bin", 3 * MIB + 1000 * i, seed=300 + i)
    return root


@pytest.mark.parametrize("direction", ["upload", "download"])
@pytest.mark.parametrize("bundle", [True, False])
def test_the_engine_runs_mc_on_the_budget_over_a_real_sshd(
    monkeypatch, lan_mixed, sshd, remote_dir, local_dir, direction, bundle
):
    """With bundles, every chunk runs on at most two channels and the summary says why; with
    bundles off the small files go over SFTP and MC hands out its eight."""
    monkeypatch.setattr(multichunk, "host_cores", lambda: 2)
    name = f"lanb-{direction}-{bundle}"
    if direction == "upload":
        src, dst_dir = Endpoint("file", str(lan_mixed)), remote_dir / name
        dst = Endpoint("sftp", str(dst_dir), sshd.target())
    else:
        subprocess.run(["cp", "-a", str(lan_mixed), str(remote_dir / name)], check=True)
        src, dst_dir = Endpoint("sftp", str(remote_dir / name), sshd.target()), local_dir / name
        dst = Endpoint("file", str(dst_dir))
    link = LinkInfo(rtt_s=0.001, bandwidth_bps=1e9, source="given", channel_window_bytes=WINDOW)
    summary = run_copy(CopyRequest(src, dst, algorithm="mc", link=link, bundle=bundle, use_store=False))
    assert summary["failed"] == [] and summary["verify"]["verified"] == 70
    assert tree_digest(dst_dir) == tree_digest(lan_mixed) and temp_files(dst_dir) == []
    notes = "\n".join(summary["tuning"].get("notes", []))
    chunks = summary["chunks"]
    assert len(chunks) == 4, chunks
    if bundle:
        assert max(c["cc"] for c in chunks) <= 2, chunks
        assert "2 of 8 channels in all" in notes, notes
    else:
        assert max(c["cc"] for c in chunks) > 2, chunks
        assert "channels in all" not in notes, notes
