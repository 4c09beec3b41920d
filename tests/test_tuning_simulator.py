"""The link simulator: each modelled effect, rate changes, the Multi-Chunk session."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.tuning import LinkInfo, LinkSimulator
from airflow_transfer.tuning.chunks import ChunkSpec
from airflow_transfer.tuning.dataset import SortedSizes
from airflow_transfer.tuning.executor import ChunkExecutor, SessionExecutor

MB = 1024 * 1024


def table(sizes) -> pa.Table:
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    return pa.table(
        {"path": pa.array([f"f{i:07d}" for i in range(sizes.size)]), "size": sizes, "mtime": np.zeros(sizes.size)}
    )


LINK = LinkInfo(rtt_s=0.1, bandwidth_bps=8 * MB * 8 / 0.1, max_window_bytes=16 * MB, source="profiler")


def rate(sim: LinkSimulator, t: pa.Table, **params) -> float:
    return sim.run_chunk(t, 0, t.num_rows, TransferParams(**params), "x").throughput_mbit


def test_simulator_implements_both_executor_protocols():
    sim = LinkSimulator(LINK)
    assert isinstance(sim, ChunkExecutor) and isinstance(sim, SessionExecutor)


def test_pipelining_helps_small_files_until_the_bdp_is_in_flight():
    """Paper 000 eq. 3/4: bytes per RTT grow with files in flight until they reach the BDP."""
    t = table(np.full(2000, MB))
    sim = LinkSimulator(LINK)
    rates = {pp: rate(sim, t, pp=pp) for pp in (1, 2, 4, 8, 16, 32)}
    assert rates[1] < rates[2] < rates[4] < rates[8]
    assert rates[8] > 5 * rates[1]
    assert rates[32] == pytest.approx(rates[16], rel=0.05)  # past the BDP: flat


def test_parallelism_hurts_small_files_and_helps_large_ones_on_short_windows():
    link = LinkInfo(rtt_s=0.1, bandwidth_bps=1e9, max_window_bytes=MB)
    sim = LinkSimulator(link, op_cost_s=0.005, range_min=256 * 1024)
    small = table(np.full(3000, 600_000))
    assert rate(sim, small, pp=16, p=4) < rate(sim, small, pp=16, p=1)
    large = table(np.full(40, 256 * MB))
    assert rate(sim, large, pp=2, p=8) > 3 * rate(sim, large, pp=2, p=1)


def test_too_many_connections_overload_the_path():
    link = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, max_window_bytes=2 * MB)
    sim = LinkSimulator(link)
    t = table(np.full(2000, 64 * MB))
    curve = [rate(sim, t, pp=2, cc=cc) for cc in (1, 2, 4, 8, 32, 64)]
    peak = int(np.argmax(curve))
    assert 0 < peak < len(curve) - 1
    assert curve[-1] < 0.8 * max(curve)


def test_cpu_ceiling_caps_the_aggregate():
    t = table(np.full(200, 64 * MB))
    free = rate(LinkSimulator(LINK), t, pp=2, cc=8)
    capped = rate(LinkSimulator(LINK, cpu_bps=2e8), t, pp=2, cc=8)
    assert capped <= 200.0 + 1e-6 < free


def test_slow_start_makes_small_chunks_slower():
    sim = LinkSimulator(LINK, setup_rtts=0)
    small_chunk = rate(sim, table(np.full(10, 4 * MB)), pp=4, cc=2)
    big_chunk = rate(sim, table(np.full(1000, 4 * MB)), pp=4, cc=2)
    assert small_chunk < 0.7 * big_chunk


def test_new_connections_cost_setup_once_then_come_from_the_pool():
    sim = LinkSimulator(LINK, setup_rtts=10)
    t = table(np.full(100, MB))
    first = sim.run_chunk(t, 0, 100, TransferParams(pp=8, cc=4), "a").seconds
    again = sim.run_chunk(t, 0, 100, TransferParams(pp=8, cc=4), "b").seconds
    assert first - again == pytest.approx(10 * LINK.rtt_s)


def test_rate_change_in_the_middle_of_a_chunk_is_piecewise():
    t = table(np.full(400, 64 * MB))
    params = TransferParams(pp=2, cc=4)
    base = LinkSimulator(LINK, setup_rtts=0)
    full = base.run_chunk(t, 0, 400, params, "a").seconds
    startup, steady = base.chunk_timing(SortedSizes.of(t).sizes, params, LINK.bandwidth_bps)
    half_at = startup + steady / 2
    halved = LinkSimulator(LINK, setup_rtts=0, rate_changes=[(half_at, LINK.bandwidth_bps / 2)])
    seconds = halved.run_chunk(t, 0, 400, params, "a").seconds
    _, slow_steady = halved.chunk_timing(SortedSizes.of(t).sizes, params, LINK.bandwidth_bps / 2)
    assert seconds == pytest.approx(half_at + slow_steady / 2)
    assert seconds > full


def test_simulation_is_deterministic_and_logged():
    t = table(np.random.default_rng(3).integers(1, 10 * MB, 3000))
    runs = []
    for _ in range(2):
        sim = LinkSimulator(LINK, op_cost_s=0.001)
        runs.append(
            [sim.run_chunk(t, lo, lo + 1000, TransferParams(pp=6, cc=3), f"c{lo}").seconds for lo in (0, 1000, 2000)]
        )
        assert [c.chunk_id for c in sim.calls] == ["c0", "c1000", "c2000"]
        assert sim.now == pytest.approx(sum(runs[-1]))
    assert runs[0] == runs[1]


def test_outcomes_are_recorded_on_request():
    t = table(np.full(5, MB))
    result = LinkSimulator(LINK, record_outcomes=True).run_chunk(t, 1, 4, TransferParams(), "x")
    assert [o.path for o in result.outcomes] == ["f0000001", "f0000002", "f0000003"]
    assert all(o.ok for o in result.outcomes) and not result.failed
    assert LinkSimulator(LINK).run_chunk(t, 1, 4, TransferParams(), "x").outcomes == []


def test_run_chunk_rejects_bad_ranges():
    t = table(np.full(5, MB))
    with pytest.raises(ValueError, match=r"chunk x: rows \[3, 9\) are not a non-empty range of the 5-row"):
        LinkSimulator(LINK).run_chunk(t, 3, 9, TransferParams(), "x")
    with pytest.raises(ValueError, match="rate change"):
        LinkSimulator(LINK, rate_changes=[(1.0, 0)])


# -- Multi-Chunk session ------------------------------------------------------------------


def spec(t: pa.Table, cid: str, start: int, stop: int, **params) -> ChunkSpec:
    s = SortedSizes.of(t)
    return ChunkSpec(
        cid,
        start,
        stop,
        stop - start,
        s.bytes(start, stop),
        int(s.sizes[start]),
        int(s.sizes[stop - 1]),
        TransferParams(**params),
    )


def test_session_runs_chunks_at_once_and_reports_each_completion_once():
    # Windows of 2 MB on an 8 MB BDP: neither chunk fills the link alone, together they do.
    link = LinkInfo(rtt_s=0.1, bandwidth_bps=8 * MB * 8 / 0.1, max_window_bytes=2 * MB)
    t = table(np.concatenate([np.full(2000, 200_000), np.full(40, 64 * MB)]))
    sim = LinkSimulator(link, progress_interval=0.5)
    session = sim.open_session(t)
    session.start(spec(t, "small", 0, 2000, pp=33), 2)
    session.start(spec(t, "large", 2000, 2040, pp=2), 2)
    events, done = [], []
    while len(done) < 2:
        ev = session.wait_any()
        events.append(ev)
        if ev.done:
            done.append(ev)
    assert sorted(e.chunk_id for e in done) == ["large", "small"]
    assert all(e.result.bytes == e.bytes_done for e in done)
    progress = [e for e in events if not e.done and e.chunk_id == "large"]
    assert progress and all(b.bytes_done >= a.bytes_done for a, b in zip(progress, progress[1:]))
    assert [e.at for e in events] == sorted(e.at for e in events)
    # Both ran at once: the session took less than the two chunks back to back.
    serial = LinkSimulator(link)
    back_to_back = sum(
        serial.run_chunk(t, a, b, TransferParams(pp=pp, cc=2), "s").seconds
        for a, b, pp in ((0, 2000, 33), (2000, 2040, 2))
    )
    assert max(e.at for e in done) < 0.9 * back_to_back
    with pytest.raises(RuntimeError, match="no chunk running"):
        session.wait_any()


def test_session_more_channels_finish_sooner():
    t = table(np.full(200, 64 * MB))
    finish = {}
    for boost in (False, True):
        sim = LinkSimulator(LinkInfo(rtt_s=0.1, bandwidth_bps=1e10, max_window_bytes=4 * MB))
        session = sim.open_session(t)
        session.start(spec(t, "c", 0, 200, pp=2), 1)
        if boost:
            session.set_channels("c", 8)
        ev = session.wait_any()
        while not ev.done:
            ev = session.wait_any()
        finish[boost] = ev.at
        assert ev.result.params.cc == (8 if boost else 1)
    assert finish[True] < finish[False] / 4


def test_session_errors_are_clear():
    t = table(np.full(10, MB))
    session = LinkSimulator(LINK).open_session(t)
    session.start(spec(t, "a", 0, 10), 1)
    with pytest.raises(ValueError, match="chunk a is already running"):
        session.start(spec(t, "a", 0, 10), 1)
    with pytest.raises(ValueError, match="chunk b is not running"):
        session.set_channels("b", 2)
    with pytest.raises(ValueError, match="channels must be a whole number >= 1"):
        session.set_channels("a", 0)
