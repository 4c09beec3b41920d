"""Algorithms driven by the link simulator: what each one decides from measured throughput."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.tuning import ALGORITHMS, LinkInfo, LinkSimulator, get_algorithm
from airflow_transfer.tuning.adaptive_cc import AdaptiveCC
from airflow_transfer.tuning.base import Ramp
from airflow_transfer.tuning.models import pp_param
from airflow_transfer.tuning.names import ALGORITHM_NAMES

MB = 1024 * 1024


def table(sizes) -> pa.Table:
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    return pa.table(
        {"path": pa.array([f"f{i:07d}" for i in range(sizes.size)]), "size": sizes, "mtime": np.zeros(sizes.size)}
    )


def mixed_sizes() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.concatenate(
        [
            rng.integers(10_000, 500_000, 3000),
            rng.integers(1 * MB, 3 * MB, 300),
            rng.integers(20 * MB, 100 * MB, 50),
            rng.integers(300 * MB, 900 * MB, 6),
        ]
    )


def covered_rows(results, sim) -> list[tuple[int, int]]:
    return sorted((c.start, c.stop) for c in sim.calls)


class RunChunkOnly:
    """An executor with run_chunk only (no sessions), wrapping the simulator."""

    def __init__(self, sim: LinkSimulator) -> None:
        self.sim = sim

    def run_chunk(self, *args):
        return self.sim.run_chunk(*args)


# -- every algorithm moves every file exactly once ----------------------------------------


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_moves_each_row_once(name):
    sizes = mixed_sizes()
    t = table(sizes)
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, max_window_bytes=2 * MB, source="profiler")
    sim = LinkSimulator(link, op_cost_s=0.0005)
    results = get_algorithm(name).run(t, link, sim)
    rows = covered_rows(results, sim)
    assert rows[0][0] == 0 and rows[-1][1] == len(sizes)
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
    assert sum(r.files for r in results) == len(sizes)
    assert sum(r.bytes for r in results) == int(sizes.sum())
    assert all(r.throughput_mbit > 0 for r in results)


def test_the_names_the_command_line_offers_are_the_registry_s():
    """The CLI lists the names without importing the classes: the two lists must agree."""
    assert ALGORITHM_NAMES == tuple(ALGORITHMS)


def test_empty_manifest_runs_nothing():
    sim = LinkSimulator(LinkInfo(rtt_s=0.05, bandwidth_bps=1e9))
    for name in ALGORITHMS:
        assert get_algorithm(name).run(table([]), LinkInfo(rtt_s=0.05, bandwidth_bps=1e9), sim) == []
    assert sim.calls == []


def test_run_needs_an_executor_and_an_arrow_table():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9)
    with pytest.raises(ValueError, match="has no run_chunk"):
        get_algorithm("pcp").run(table([1, 2]), link, object())
    with pytest.raises(ValueError, match="needs the sorted manifest as an Arrow table"):
        get_algorithm("pcp").run(np.array([1, 2]), link, LinkSimulator(link))


# -- fixed / globus ------------------------------------------------------------------------


def test_fixed_runs_the_given_parameters_in_chunks_of_the_given_size():
    t = table(np.full(100, MB))
    sim = LinkSimulator(LinkInfo(rtt_s=0.05, bandwidth_bps=1e9))
    results = get_algorithm("fixed", pp=8, p=2, cc=4, chunk_bytes=25 * MB).run(t, sim.link, sim)
    assert len(results) == 4
    assert {r.params for r in results} == {TransferParams(pp=8, p=2, cc=4)}


def test_globus_runs_one_static_chunk():
    t = table(np.full(500, MB))
    sim = LinkSimulator(LinkInfo(rtt_s=0.05, bandwidth_bps=1e9))
    [result] = get_algorithm("globus").run(t, sim.link, sim)
    assert result.params == TransferParams(pp=pp_param(20), p=2, cc=2)


# -- the exponential ramp (paper 000 Alg. 2) --------------------------------------------------


def test_ramp_doubles_until_a_drop_of_more_than_five_percent():
    ramp = Ramp(1, 64)
    for thr in (100, 180, 300, 296):  # 296 is within 5 % of 300: keep going
        assert not ramp.done
        ramp.feed(thr)
    assert ramp.value == 16
    ramp.feed(250)  # more than 5 % below 296: stop
    assert ramp.done and ramp.optimum == 4  # the best measured level (300 Mbit/s at 4)
    assert [v for v, _ in ramp.history] == [1, 2, 4, 8, 16]


def test_ramp_stops_at_its_cap():
    ramp = Ramp(1, 4)
    for thr in (1, 2, 3):
        ramp.feed(thr)
    assert ramp.done and ramp.optimum == 4


# -- PCP ---------------------------------------------------------------------------------------


def test_pcp_paper001_replay_ramps_cc_over_the_divided_set():
    """5000 x 1 MB at BDP 5 MB: one pp, no p, cc 1, 2, 4, ... while throughput keeps rising."""
    link = LinkInfo(rtt_s=0.1, bandwidth_bps=5 * MB * 8 / 0.1, max_window_bytes=2 * MB, source="profiler")
    t = table(np.full(5000, MB))
    sim = LinkSimulator(link)
    results = get_algorithm("pcp").run(t, link, sim)
    assert {r.params.pp for r in results} == {5} and {r.params.p for r in results} == {1}
    ccs = [r.params.cc for r in results]
    assert ccs[:3] == [1, 2, 4]
    thr = [r.throughput_mbit for r in results]
    assert thr[1] > thr[0] and thr[2] > thr[1]


def test_pcp_stops_the_cc_ramp_at_the_drop_and_moves_the_rest_at_the_best_cc():
    # Short windows and a small bottleneck queue: beyond a few connections the path overloads.
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, max_window_bytes=2 * MB, source="profiler")
    sim = LinkSimulator(link, queue_bytes=0, overload_penalty=0.6)
    t = table(np.random.default_rng(4).integers(100_000, 3 * MB, 40_000))
    pcp = get_algorithm("pcp", min_chunks=8)
    results = pcp.run(t, link, sim)
    ramp = [r for r in results if "rest" not in r.chunk_id]
    rest = [r for r in results if "rest" in r.chunk_id]
    ccs = [r.params.cc for r in ramp]
    assert ccs == [1, 2, 4, 8][: len(ccs)] and len(ccs) >= 3
    thr = [r.throughput_mbit for r in ramp]
    assert thr[-1] <= 0.95 * thr[-2]  # the ramp ended on a drop
    best = ramp[int(np.argmax(thr))].params.cc
    assert rest and {r.params.cc for r in rest} == {best}
    assert len({r.params.pp for r in rest}) == len(rest)  # combined: one chunk per pp level


def test_pcp_set2_ramps_parallelism_before_concurrency():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=2e9, max_window_bytes=MB, source="profiler")
    sim = LinkSimulator(link)
    t = table(np.full(3000, 32 * MB))
    results = get_algorithm("pcp").run(t, link, sim)
    probes = [r for r in results if "rest" not in r.chunk_id]
    first_cc_step = next(i for i, r in enumerate(probes) if r.params.cc > 1)
    assert all(r.params.cc == 1 for r in probes[:first_cc_step])
    assert [r.params.p for r in probes[:3]] == [1, 2, 4]
    p_after = {r.params.p for r in probes[first_cc_step:]}
    assert len(p_after) == 1 and p_after.pop() > 1  # p frozen at its optimum while cc ramps
    assert {r.params.pp for r in results} == {pp_param(2)}
    # Probe chunks hold more than min_chunk x cc bytes and more than cc files (Alg. 2).
    min_chunk = get_algorithm("pcp").divide_min_chunk(type("C", (), {"link": link})())
    assert all(r.bytes >= min_chunk * r.params.cc and r.files > r.params.cc for r in probes)


# -- SSH channel window: ramps start where one connection is known to be window-bound -----------

WAN50_SSH = LinkInfo(rtt_s=0.05, bandwidth_bps=500e6, channel_window_bytes=2 * MB, file_rtts=2, source="profiler")


def test_ramps_start_at_the_connections_the_ssh_window_needs():
    """wan50 over SFTP: a 3.1 MB BDP over OpenSSH's 2 MiB channel window needs 2 connections,
    so the cc ramp (Set 1) and the p ramp (Set 2) start at 2, not at the paper's 1."""
    from airflow_transfer.tuning.models import streams_for_channel_window

    assert streams_for_channel_window(WAN50_SSH, 32) == 2
    assert streams_for_channel_window(WAN50_SSH, 1) == 1  # never above the cap
    wan100 = LinkInfo(rtt_s=0.1, bandwidth_bps=500e6, channel_window_bytes=2 * MB, source="profiler")
    assert streams_for_channel_window(wan100, 32) == 3  # 6.25 MB / 2 MiB
    small = table(np.full(1000, MB))
    sim = LinkSimulator(WAN50_SSH)
    ramp = [r for r in get_algorithm("pcp").run(small, WAN50_SSH, sim) if "rest" not in r.chunk_id]
    assert [r.params.cc for r in ramp][:2] == [2, 4]
    assert [s.params.cc for s in get_algorithm("pcp").plan(small, WAN50_SSH)][:3] == [2, 4, 8]
    big = table(np.full(20, 50 * MB))
    probes = [r for r in get_algorithm("pcp").run(big, WAN50_SSH, LinkSimulator(WAN50_SSH)) if "rest" not in r.chunk_id]
    assert probes[0].params.p == 2 and probes[0].params.cc == 1
    assert get_algorithm("pcp").plan(big, WAN50_SSH)[0].params.p == 2
    accs = get_algorithm("adaptive-cc").run(small, WAN50_SSH, LinkSimulator(WAN50_SSH))
    assert accs[0].params.cc == 2
    assert get_algorithm("adaptive-cc").plan(small, WAN50_SSH)[0].params.cc == 2


def test_two_large_files_are_not_spent_on_one_window_bound_connection():
    """`large` (2 x 512 MiB) is too few files for a Set-2 probe to leave a rest, so its one
    chunk is the whole dataset: it gets the window's 2 connections (it used to run at p=1)."""
    results = get_algorithm("pcp").run(table(np.full(2, 512 * MB)), WAN50_SSH, LinkSimulator(WAN50_SSH))
    assert len(results) == 1 and results[0].params.p * results[0].params.cc >= 2


def test_without_a_protocol_window_or_a_measured_link_the_ramps_start_at_one():
    from airflow_transfer.tuning.models import streams_for_channel_window

    tcp_only = LinkInfo(rtt_s=0.05, bandwidth_bps=500e6, source="profiler")  # GridFTP-like: TCP grows
    assert streams_for_channel_window(tcp_only, 32) == 1
    unmeasured = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, channel_window_bytes=2 * MB, source="unknown")
    assert streams_for_channel_window(unmeasured, 32) == 1  # a placeholder BDP is not acted on
    sim = LinkSimulator(unmeasured)
    assert get_algorithm("adaptive-cc").run(table(np.full(1000, MB)), unmeasured, sim)[0].params.cc == 1


def test_sftp_link_adds_the_openssh_channel_window():
    from airflow_transfer.job import sftp_link
    from airflow_transfer.tuning.models import OPENSSH_CHANNEL_WINDOW, effective_window

    link = sftp_link(LinkInfo(rtt_s=0.05, bandwidth_bps=500e6, source="profiler"))
    assert link.channel_window_bytes == OPENSSH_CHANNEL_WINDOW and link.file_rtts == 2
    assert effective_window(link) == OPENSSH_CHANNEL_WINDOW  # below Linux's 4 MiB default
    given = sftp_link(LinkInfo(rtt_s=0.05, bandwidth_bps=500e6, channel_window_bytes=8 * MB, source="cli"))
    assert given.channel_window_bytes == 8 * MB  # a known window is kept
    with pytest.raises(ValueError, match="channel_window_bytes"):
        LinkInfo(rtt_s=0.05, bandwidth_bps=500e6, channel_window_bytes=-1)


# -- Multi-Chunk ---------------------------------------------------------------------------------


def test_mc_runs_chunks_together_and_moves_channels_to_the_longest_eta():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, max_window_bytes=2 * MB, source="profiler")
    sim = LinkSimulator(link, op_cost_s=0.0005)
    mc = get_algorithm("mc", channels=8)
    results = mc.run(table(mixed_sizes()), link, sim)
    assert len(results) == 4
    starts = [c.at for c in sim.calls]
    assert starts == [0.0] * 4  # 8 channels over 4 chunks: everything starts at once
    first_done = min(sim.calls, key=lambda c: c.at + c.seconds)
    moves_after = [m for m in mc.last_moves if m[0] > 0]
    assert moves_after and moves_after[0][0] == pytest.approx(first_done.at + first_done.seconds)
    # The freed channels went to chunks still running, never to the finished one.
    assert all(cid != first_done.chunk_id for _, cid, _ in moves_after)
    assert sum(r.files for r in results) == len(mixed_sizes())


def test_mc_with_fewer_channels_than_chunks_starts_the_rest_as_channels_free_up():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, max_window_bytes=2 * MB, source="profiler")
    sim = LinkSimulator(link)
    mc = get_algorithm("mc", channels=2)
    mc.run(table(mixed_sizes()), link, sim)
    by = {c.chunk_id: c for c in sim.calls}
    assert by["mc.huge"].at == 0.0 and by["mc.small"].at == 0.0  # round robin: huge, small first
    assert by["mc.large"].at > 0.0 and by["mc.middle"].at > 0.0
    assert max(m[2] for m in mc.last_moves) <= 2


def test_mc_without_sessions_runs_its_chunks_one_by_one():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, source="profiler")
    sim = LinkSimulator(link)
    results = get_algorithm("mc", channels=4).run(table(mixed_sizes()), link, RunChunkOnly(sim))
    assert [r.chunk_id for r in results] == ["mc.huge", "mc.small", "mc.large", "mc.middle"]
    ends = [c.at + c.seconds for c in sim.calls]
    assert all(ends[i] == pytest.approx(sim.calls[i + 1].at) for i in range(3))
    assert all(r.params.cc == min(4, r.files) for r in results)


# -- Adaptive concurrency (paper 001 section 4.1) ---------------------------------------------------


def test_adaptive_cc_decisions():
    a = AdaptiveCC(max_cc=8)
    assert a.next_cc(1, 100.0, None) == 2  # first chunk: go up
    assert a.next_cc(3, 120.0, 100.0) == 4  # rising: up
    assert a.next_cc(3, 90.0, 100.0) == 2  # falling: down
    assert a.next_cc(1, 50.0, 100.0) == 1  # never below 1
    assert a.next_cc(8, 200.0, 100.0) == 8  # never above max_cc
    held = AdaptiveCC(hold_band=0.05)
    assert held.next_cc(4, 102.0, 100.0) == 4  # within the band: hold


def test_adaptive_cc_climbs_then_backs_off_when_the_link_degrades():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, max_window_bytes=MB, source="profiler")
    sim = LinkSimulator(link, rate_changes=[(60.0, 2e8)])
    t = table(np.full(6000, 2 * MB))
    results = get_algorithm("adaptive-cc", files_per_chunk=100).run(t, link, sim)
    ccs = [r.params.cc for r in results]
    assert ccs[:4] == [1, 2, 3, 4]  # climbing while throughput rises
    assert all(r.files == 100 for r in results)
    change_at = next(i for i, c in enumerate(sim.calls) if c.at + c.seconds > 60.0)
    peak = max(ccs[: change_at + 1])
    assert min(ccs[change_at + 1 :]) < peak  # the drop in throughput lowered concurrency


def test_adaptive_cc_uses_gridftp_default_pipelining_on_an_unmeasured_link():
    t = table(np.full(1000, MB))
    specs = get_algorithm("adaptive-cc").plan(t, LinkInfo.unknown())
    assert {s.params.pp for s in specs} == {pp_param(20)}
    measured = get_algorithm("adaptive-cc").plan(t, LinkInfo(rtt_s=0.1, bandwidth_bps=5 * MB * 8 / 0.1))
    assert {s.params.pp for s in measured} == {pp_param(4)}


@pytest.mark.parametrize(
    "sizes",
    [np.zeros(50, np.int64), np.array([7 * MB]), np.array([0, 1, 10 * MB])],
    ids=["all-empty-files", "one-file", "tiny-mixed"],
)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_degenerate_datasets_finish(name, sizes):
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, source="profiler")
    sim = LinkSimulator(link)
    results = get_algorithm(name).run(table(sizes), link, sim)
    assert sum(r.files for r in results) == len(sizes)
    assert all(r.seconds > 0 for r in results)


@pytest.mark.parametrize(
    "scenario, sizes, large_may_grow",
    [
        # wan50's `mixed` (1 B - 4 MiB): its Large class is 3-4 MiB against a 2 MiB channel window, so
        # its files leave the window part-empty; capped at 3 it ran alone at ~340 Mbit/s of 457 possible.
        (
            "files barely longer than the window take freed channels",
            np.random.default_rng(7).integers(1, 4 * 1024 * 1024 + 1, 1000),
            True,
        ),
        # 50 MiB files fill their window: more than ceil(BDP / window) + 1 channels only overfill the queue.
        (
            "files of many windows stay at the bound when others finish",
            np.concatenate([np.full(300, 512 * 1024), np.full(40, 50 * 1024 * 1024)]),
            False,
        ),
    ],
)
def test_mc_channel_bound_follows_how_long_a_file_holds_its_window(scenario, sizes, large_may_grow):
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=500e6, channel_window_bytes=2 * 1024 * 1024, source="profiler")
    sim = LinkSimulator(link, op_cost_s=0.0005)
    mc = get_algorithm("mc", channels=8)
    results = mc.run(table(sizes), link, sim)
    assert sum(r.files for r in results) == len(sizes), scenario
    large = [n for _, cid, n in mc.last_moves if cid == "mc.large"]
    assert large and large[0] == 3, (scenario, mc.last_moves)
    assert (max(large) > 3) == large_may_grow, (scenario, mc.last_moves)
