"""Multi-Chunk's channels for chunks whose files travel in bundles (tuning/multichunk.py).

A bundled chunk is one stream per channel, so it gets the channels whose windows cover
the BDP plus one, or one per core if that is more; a chunk of larger files, or any chunk
when bundles are off, keeps MC's usual count. Named scenarios in memory first (the core
count given), then the real engine over a real sshd.
"""

from __future__ import annotations

import numpy as np
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.tuning import LinkInfo, multichunk
from airflow_transfer.tuning.chunks import make_spec
from airflow_transfer.tuning.dataset import SortedSizes
from airflow_transfer.tuning.multichunk import MultiChunk, bundle_channels, useful_channels
from tests.support.bundling_sim import BundlingSim, StopsBundling, size_table
from tests.support.data import temp_files, tree_digest, write_random

KIB, MIB = 1024, 1024 * 1024
BUNDLED = MIB  # what the engine bundles: files up to 1 MiB
WINDOW = 2 * MIB  # OpenSSH's channel window

# (name, RTT s, rate bit/s, cores, channels a bundled chunk may use)
SCENARIOS = [
    ("lan, 2 cores: one window covers the BDP, plus one", 0.001, 1e9, 2, 2),
    ("wan50, 2 cores: two windows, plus one", 0.05, 5e8, 2, 3),
    ("wan100, 2 cores: three windows, plus one", 0.1, 5e8, 2, 4),
    ("lan, 1 core: still the window rule's two", 0.001, 1e9, 1, 2),
    ("lan, 16 cores: one per core", 0.001, 1e9, 16, 16),
    ("wan50, 6 cores: one per core", 0.05, 5e8, 6, 6),
]


def _link(rtt: float, rate: float) -> LinkInfo:
    return LinkInfo(rtt_s=rtt, bandwidth_bps=rate, source="profiler", channel_window_bytes=WINDOW)


def _spec(sizes: list[int]):
    s = SortedSizes.of(np.sort(np.asarray(sizes, dtype=np.int64)))
    return make_spec(s, "mc.small", 0, len(sizes), TransferParams(pp=4, p=1, cc=1))


@pytest.mark.parametrize("name,rtt,rate,cores,want", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_bundled_chunk_gets_the_window_rule_or_a_channel_per_core(name, rtt, rate, cores, want):
    link = _link(rtt, rate)
    assert bundle_channels(link, cores) == want
    spec = _spec([64 * KIB] * 2000)
    assert useful_channels(spec, link, BUNDLED, cores=cores) == want
    # no more channels than files, bundled or not
    assert useful_channels(_spec([64 * KIB] * 2), link, BUNDLED, cores=cores) == min(2, want)


def test_a_chunk_not_bundled_keeps_every_channel():
    link = _link(0.05, 5e8)
    small = _spec([64 * KIB] * 2000)
    assert useful_channels(small, link, 0, cores=2) == 2000  # bundles off: the file count
    one_big = _spec([64 * KIB] * 1999 + [BUNDLED + 1])
    assert useful_channels(one_big, link, BUNDLED, cores=2) == 2000  # one file goes over SFTP


@pytest.mark.parametrize("bundled", [BUNDLED, 0])
def test_mc_never_gives_a_bundled_chunk_more_than_its_cap(monkeypatch, bundled):
    monkeypatch.setattr(multichunk, "host_cores", lambda: 2)
    link = _link(0.05, 5e8)  # wan50: cap 3
    # small files (bundled when bundles are on) and huge ones (never bundled)
    sizes = [64 * KIB] * 3000 + [200 * MIB] * 4
    mc = MultiChunk(channels=8)
    sim = BundlingSim(link, bundled)
    results = mc.run(size_table(sizes), link, sim)
    assert sum(r.files for r in results) == len(sizes)
    most = {}
    for _, cid, n in mc.last_moves:
        most[cid] = max(most.get(cid, 0), n)
    if bundled:
        assert most["mc.small"] == 3, mc.last_moves
        assert any("mc.small moves in bundles" in n and "at most 3 of 8" in n for n in mc.notes), mc.notes
    else:
        assert most["mc.small"] > 3, mc.last_moves
        assert mc.notes == []
    assert "mc.huge" in most  # the huge chunk is not capped by the bundle rule


def test_when_bundles_stop_the_chunk_gets_its_channels_back(monkeypatch):
    monkeypatch.setattr(multichunk, "host_cores", lambda: 2)
    link = _link(0.05, 5e8)
    sizes = [64 * KIB] * 3000 + [200 * MIB] * 4
    mc = MultiChunk(channels=8)
    results = mc.run(size_table(sizes), link, StopsBundling(link, BUNDLED))
    assert sum(r.files for r in results) == len(sizes)
    small = [(at, n) for at, cid, n in mc.last_moves if cid == "mc.small"]
    assert small[0] == (0.0, 3), mc.last_moves  # capped while bundles were on
    assert max(n for _, n in small) > 3, mc.last_moves  # lifted once they stopped
    assert any("bundles stopped" in n for n in mc.notes), mc.notes


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcb") / "tiny"
    for i in range(240):
        write_random(root / f"d{i % 6}" / f"f{i:03d}.dat", 2000 + 37 * i, seed=i)
    return root


@pytest.mark.parametrize("bundle", [True, False])
def test_the_engine_tells_mc_which_files_it_bundles(monkeypatch, tiny, sshd, remote_dir, bundle):
    """Over a real sshd: with bundles on, the chunk runs on at most the rule's channels and the
    summary says why; with bundles off it gets MC's eight."""
    monkeypatch.setattr(multichunk, "host_cores", lambda: 2)
    dst = remote_dir / "mcb"
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(tiny)),
            Endpoint("sftp", str(dst), sshd.target()),
            algorithm="mc",
            link=LinkInfo(rtt_s=0.001, bandwidth_bps=1e9, source="given", channel_window_bytes=WINDOW),
            bundle=bundle,
            use_store=False,
        )
    )
    assert summary["failed"] == [] and summary["verify"]["verified"] == 240
    assert tree_digest(dst) == tree_digest(tiny) and temp_files(dst) == []
    notes = "\n".join(summary["tuning"].get("notes", []))
    chunks = summary["chunks"]
    if bundle:
        assert all("bundle:" in c["transport"] for c in chunks), chunks
        assert max(c["cc"] for c in chunks) <= 2, chunks
        assert "moves in bundles, one stream per channel: at most 2 of 8 channels" in notes, notes
    else:
        assert not any("bundle:" in c.get("transport", "") for c in chunks), chunks
        assert max(c["cc"] for c in chunks) > 2, chunks
        assert "moves in bundles" not in notes, notes
