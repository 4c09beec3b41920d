"""First contact: auto on a link nobody measured (tuning/first_contact.py, tuning/cc_ramp.py).

The ramp's rules in memory, named link scenarios on the simulator, and the engine end: the RTT
read from a real SSH connection, what the summary says, and what the tuning library keeps for
the next copy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from airflow_transfer.store import Store
from airflow_transfer.tuning import LinkInfo, first_contact, get_algorithm
from airflow_transfer.tuning.cc_ramp import CCRamp
from airflow_transfer.tuning.dataset import SortedSizes
from airflow_transfer.tuning.first_contact import (
    FirstContact,
    bundle_cap,
    contact_link,
    interval_seconds,
    ready_settle_seconds,
)
from airflow_transfer.tuning.simulator import LinkSimulator
from tests.support.bundling_sim import BundlingSim, size_table
from tests.support.cli import run_cli, ssh_args

MB = 1 << 20
WINDOW = 2 * MB
UNKNOWN_SSH = dataclasses.replace(LinkInfo.unknown(), file_rtts=2, channel_window_bytes=WINDOW)


def table(sizes) -> pa.Table:
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    return pa.table(
        {"path": pa.array([f"f{i:07d}" for i in range(sizes.size)]), "size": sizes, "mtime": np.zeros(sizes.size)}
    )


def simulator(rtt_s: float, mbit: float, **kw) -> LinkSimulator:
    link = LinkInfo(rtt_s=rtt_s, bandwidth_bps=mbit * 1e6, source="profiler")
    return LinkSimulator(link, window_bytes=WINDOW, control_rtts=2, progress_interval=0.25, **kw)


# -- the ramp's rules, in memory ----------------------------------------------------------------


def feed(ramp: CCRamp, rates_by_cc: dict[int, float], intervals: int) -> list[int]:
    """Drive the ramp with a link whose rate depends only on cc; returns cc per interval."""
    seen = []
    for _ in range(intervals):
        seen.append(ramp.cc)
        ramp.feed(0.0, rates_by_cc[ramp.cc])
    return seen


def test_ramp_doubles_while_it_gains_then_goes_back_to_the_best_and_holds():
    rates = {2: 100.0, 4: 190.0, 8: 300.0, 16: 310.0, 32: 250.0}  # 16 gains only 3 %
    ramp = CCRamp(start=2, cap=32, settle_s=0.5, window_s=1.0)
    assert feed(ramp, rates, 7) == [2, 4, 8, 16, 8, 8, 8]
    assert ramp.settled_cc == 8 and ramp.mode == "hold" and ramp.peak_rate == 310.0


def test_a_doubling_that_gains_under_half_in_proportion_holds_there():
    # 4 -> 8 channels carried 77 % more: keep doubling; 8 -> 16 carried 21 % more: near the
    # bottleneck, hold 16 rather than go to 32
    ramp = CCRamp(start=4, cap=64, settle_s=0.5, window_s=1.0)
    assert feed(ramp, {4: 207.0, 8: 366.0, 16: 443.0, 32: 500.0}, 4) == [4, 8, 16, 16]
    assert ramp.mode == "hold" and ramp.settled_cc == 16
    assert ramp.steps[2].action.startswith("gained under half in proportion")


def test_one_channel_is_tried_only_where_one_window_per_rtt_carries_the_rate_seen():
    # large files on a 40 ms, 875 Mbit/s path: one 2 MiB window per RTT is 420 Mbit/s, so a
    # reading that favours one channel over two is noise, and the ramp stops at two
    fast = CCRamp(start=2, cap=32, settle_s=0.5, window_s=1.0, floor=1, one_channel_bps=420e6)
    assert feed(fast, {1: 800e6, 2: 700e6, 4: 690e6}, 3) == [2, 4, 2]
    assert fast.cc == 2 and fast.mode == "hold"
    # 117 ms, 111 Mbit/s: one window per RTT (143 Mbit/s) carries what was seen, one channel is tried
    slow = CCRamp(start=2, cap=32, settle_s=0.5, window_s=1.0, floor=1, one_channel_bps=143e6)
    assert feed(slow, {1: 104e6, 2: 90e6, 4: 88e6}, 4) == [2, 4, 1, 1]
    assert slow.settled_cc == 1


def test_ramp_tries_fewer_when_the_first_doubling_does_not_pay():
    rates = {2: 150.0, 4: 200.0, 8: 180.0, 16: 100.0}
    ramp = CCRamp(start=8, cap=32, settle_s=0.5, window_s=1.0)
    assert feed(ramp, rates, 5) == [8, 16, 4, 2, 4]
    assert ramp.settled_cc == 4


def test_hold_rechecks_on_drift_and_ignores_small_moves():
    ramp = CCRamp(start=4, cap=16, settle_s=0.5, window_s=1.0, ramping=False)
    for rate in (200.0, 210.0, 190.0, 230.0):  # reference 200, all within 25 %
        ramp.feed(0.0, rate)
    assert ramp.cc == 4 and ramp.mode == "hold"
    ramp.feed(0.0, 100.0)  # the rate halved: re-check, up first
    assert ramp.cc == 8 and ramp.mode == "up"
    ramp.feed(0.0, 95.0)  # more did not help: try fewer
    assert ramp.cc == 2
    ramp.feed(0.0, 120.0)  # fewer gained 26 % over the level it came from: keep going down
    assert ramp.cc == 2 and ramp.mode == "hold"  # the floor: hold there


def test_a_slow_interval_while_holding_does_not_move_the_level_up():
    # Two copies of 100,000 x 1 KiB on loopback, one after the other, on a two-core host whose
    # intervals read 40-78 Mbit/s at any level (Mbit/s as the tuning library kept them). Each
    # copy's slow interval set off a re-check; the interval after it, faster as most are, was
    # taken for the doubling's gain, and the next copy started a doubling higher: 4, 8, 16.
    ramp = CCRamp(start=4, cap=64, settle_s=0.5, window_s=2.0, ramping=False, known_rate=49.0e6)
    ramp.feed(5.0, 63.5e6, left_bytes=10**9)  # reference
    assert ramp.feed(7.1, 42.7e6, left_bytes=10**9) == 8  # -33 %: re-check, up first
    # 8 channels carried less than 4 did before the slow interval: not a gain; fewer are tried
    assert ramp.feed(11.2, 59.2e6, left_bytes=10**9) == 2
    assert ramp.steps[-1].action == "no gain up: trying fewer"
    # 2 channels are compared with the slow interval (the level as it is now): no gain either
    assert ramp.feed(13.3, 40.5e6, left_bytes=10**9) == 4
    assert ramp.mode == "hold" and ramp.learned_cc == 4

    # The copy after it: 8 held, a drift near the end, 16 never beat what 8 carried.
    ramp = CCRamp(start=8, cap=64, settle_s=0.5, window_s=2.0, ramping=False, known_rate=65.5e6)
    ramp.feed(5.2, 48.7e6, left_bytes=10**9)
    ramp.feed(7.3, 77.3e6, left_bytes=10**9)  # back to what the link carried: new reference
    assert ramp.feed(9.3, 45.9e6, left_bytes=10**9) == 16  # -41 %: re-check up
    for at, rate in ((13.8, 37.7e6), (15.8, 49.8e6)):  # less left than an interval moves
        assert ramp.feed(at, rate, left_bytes=1) is None
    assert ramp.learned_cc == 8  # what the next copy starts from

    # A doubling that does beat the level's reference is kept as before.
    ramp = CCRamp(start=4, cap=64, settle_s=0.5, window_s=2.0, ramping=False)
    ramp.feed(0.0, 100e6)
    assert ramp.feed(2.0, 60e6) == 8
    assert ramp.feed(4.0, 180e6) == 16 and ramp.best_cc == 8


def test_observe_measures_after_the_settle_time_and_restarts_on_a_change_of_mix():
    ramp = CCRamp(start=2, cap=8, settle_s=1.0, window_s=2.0)
    ramp.restart(0.0)
    assert ramp.observe(0.5, 0) is None  # settling: new connections are still opening
    assert ramp.observe(1.0, 1_000) is None  # bytes begin to flow
    assert ramp.observe(1.5, 1_500) is None  # flowing since the last tick: the window starts here
    assert ramp.observe(3.0, 2_500) is None  # 1.5 s is not a whole window yet
    assert ramp.observe(3.5, 3_500) == 4  # 2000 bytes in 2 s: the first level measured, double
    assert ramp.steps[0].rate_bps == pytest.approx(8_000)
    ramp.restart(3.5)  # a class finished: what was being measured is not the same mix
    assert ramp.observe(4.0, 10_000) is None and ramp._mark is None


def test_an_interval_without_progress_is_not_a_measurement():
    # A start-up (connections, the bundle helper) can outlast the settle time, and bundled bytes
    # arrive a piece at a time: neither a stall nor an empty window reads as "0 Mbit/s".
    ramp = CCRamp(start=2, cap=16, settle_s=0.5, window_s=2.0)
    ramp.restart(0.0)
    for at in (0.5, 2.5, 4.0):
        assert ramp.observe(at, 0) is None  # nothing moved yet: no window opens
    assert ramp.observe(4.5, 1_000_000) is None  # the first bytes
    assert ramp.observe(5.0, 2_000_000) is None and ramp._mark == (5.0, 2_000_000)
    assert ramp.observe(7.0, 2_000_000) is None and not ramp.steps  # a window with nothing reported
    assert ramp.observe(7.5, 6_000_000) == 4  # extended until something was: 4 MB in 2.5 s
    assert ramp.steps[0].rate_bps == pytest.approx(4_000_000 * 8 / 2.5)


def test_a_rise_back_to_what_the_link_carried_is_not_room_for_more_channels():
    # A level learned on an earlier copy over a path it fills (104 Mbit/s at 4 channels): the
    # copy's first interval reads low, the next one back at the known rate. Re-checking up from
    # that put 8 channels on the 111 Mbit/s path and the copy ran at 21 Mbit/s while it lasted.
    ramp = CCRamp(start=4, cap=16, settle_s=0.5, window_s=1.0, ramping=False, known_rate=104e6)
    assert ramp.feed(0.0, 78e6) is None  # reference
    assert ramp.feed(1.0, 102e6) is None and ramp.reference == 102e6  # +31 %, but no more than known
    assert ramp.steps[-1].action.startswith("rose")
    assert ramp.feed(2.0, 160e6) == 8  # over what the link was seen to carry: re-check up
    # Without a known rate the same rise beyond this copy's own best is room too.
    ramp = CCRamp(start=4, cap=16, settle_s=0.5, window_s=1.0, ramping=False)
    ramp.feed(0.0, 78e6)
    assert ramp.feed(1.0, 102e6) == 8


def test_near_the_end_the_level_does_not_change():
    # A drop while the last files finish is not drift worth new channels: they would still be
    # opening when the copy ends.
    ramp = CCRamp(start=8, cap=32, settle_s=1.0, window_s=2.0, ramping=False)
    ramp.feed(0.0, 400e6, left_bytes=10**9)  # reference, with 20 s of data left
    assert ramp.feed(2.0, 100e6, left_bytes=10**9) == 16  # far from the end: drifted, re-check up
    ramp = CCRamp(start=8, cap=32, settle_s=1.0, window_s=2.0, ramping=False)
    ramp.feed(0.0, 400e6, left_bytes=10**9)
    assert ramp.feed(2.0, 100e6, left_bytes=100 * MB) is None  # under 3 s at 400 Mbit/s left
    assert ramp.steps[-1].action.startswith("near the end") and ramp.cc == 8
    # while ramping, a gain seen near the end is still what the next copy starts from
    ramp = CCRamp(start=4, cap=32, settle_s=1.0, window_s=2.0)
    ramp.feed(0.0, 200e6, left_bytes=10**9)
    assert ramp.feed(3.0, 400e6, left_bytes=50 * MB) is None and ramp.learned_cc == 8


def test_a_new_channel_is_measured_only_after_its_set_up_and_slow_start():
    # 14 round trips were timed for a paramiko SFTP channel on a 139 ms path (2.0 s): the settle
    # time must cover that, or a doubling is measured before the new channels carry anything.
    settle, _ = interval_seconds(0.139, WINDOW)
    assert settle >= 2.0


def test_what_is_learned_is_the_level_held_or_the_best_while_still_ramping():
    rates = {2: 100.0, 4: 190.0, 8: 300.0, 16: 310.0}
    ramp = CCRamp(start=2, cap=32, settle_s=0.5, window_s=1.0)
    feed(ramp, rates, 2)  # 2 -> 4 -> (now at 8, not measured yet)
    assert ramp.mode == "up" and ramp.learned_cc == 4  # the copy ended mid-ramp: the best measured
    feed(ramp, rates, 3)  # 8 gained, 16 did not: back to 8
    assert ramp.mode == "hold" and ramp.learned_cc == 8 == ramp.settled_cc
    ramp.feed(0.0, 300.0)  # reference
    ramp.feed(0.0, 100.0)  # drifted: re-check up from 8 ...
    ramp.feed(0.0, 400.0)  # ... 16 beats what 8 carried before the drift
    ramp.feed(0.0, 405.0)  # 32 does not gain on 16: hold 16
    assert ramp.mode == "hold" and ramp.settled_cc == 16 == ramp.learned_cc


def test_a_level_whose_connections_were_opened_ahead_settles_after_slow_start_only():
    ramp = CCRamp(start=2, cap=32, settle_s=3.0, window_s=2.0, ready_settle_s=1.0)
    assert ramp.ahead() == 2  # the next doubling adds two channels
    ramp.opened_ahead(2)
    ramp.restart(0.0, new_channels=True)  # the copy's start: every channel is new
    assert ramp.observe(2.9, 10) is None and ramp._mark is None  # still settling
    ramp.observe(3.0, 100)
    ramp.observe(4.0, 200)
    assert ramp.observe(5.0, 300) == 4  # doubled, onto the two connections opened ahead
    assert ramp._from == pytest.approx(6.0)  # ready settle: 1 s, not 3
    assert ramp.ahead() == 4
    ramp.observe(6.0, 400)
    ramp.observe(7.0, 600)
    ramp.observe(8.0, 800)
    assert ramp.observe(9.0, 1000) == 8  # nothing was opened ahead this time
    assert ramp._from == pytest.approx(12.0)  # the full settle: handshakes first
    # holding: nothing to open ahead
    held = CCRamp(start=4, cap=32, settle_s=3.0, window_s=2.0, ramping=False)
    assert held.ahead() == 0
    # channels handed between chunks are open already; a settle under way is not cut short
    ramp.restart(9.5)
    assert ramp._from == pytest.approx(12.0)
    ramp.restart(20.0)
    assert ramp._from == pytest.approx(21.0)
    assert ready_settle_seconds(0.139, WINDOW) < interval_seconds(0.139, WINDOW)[0] - 1.0


def test_intervals_grow_with_the_rtt():
    short_settle, short_window = interval_seconds(0.001, WINDOW)
    long_settle, long_window = interval_seconds(0.2, WINDOW)
    assert (short_settle, short_window) == (0.5, 2.0)  # floors: a few ticks of the executor
    assert long_settle > 1.5 and long_window == 2.0
    assert interval_seconds(0.5, WINDOW)[1] == pytest.approx(4.0)  # 8 RTTs once that is longer


# -- named scenarios on the simulator -------------------------------------------------------------


@pytest.mark.parametrize(
    "name, rtt_s, mbit, at_least",
    [
        ("long fat pipe: 100 ms, 800 Mbit/s (BDP 5 windows)", 0.1, 800.0, 4),
        ("continental: 40 ms, 1000 Mbit/s (BDP 2.4 windows)", 0.04, 1000.0, 2),
    ],
)
def test_reaches_the_concurrency_the_link_needs_within_a_few_intervals(name, rtt_s, mbit, at_least):
    sim = simulator(rtt_s, mbit)
    auto = get_algorithm("auto")
    auto.run(table(np.full(400, 8 * MB)), UNKNOWN_SSH, sim)
    fc = auto.last_algorithm
    assert auto.last_decision.algorithm == "first-contact", name
    ramp = fc.ramp
    assert ramp.settled_cc >= at_least, (name, fc.notes)
    first_hold = next(i for i, s in enumerate(ramp.steps) if "hold" in s.action or "back" in s.action)
    assert first_hold <= 5, (name, [(s.cc, s.action) for s in ramp.steps])
    # the rate reached is near what the link carries once enough channels are open
    assert ramp.peak_rate >= 0.7 * mbit * 1e6, (name, fc.notes)


class HostDelayedRTT(LinkSimulator):
    """A fast short path whose connection's smoothed RTT also holds the hosts' delays (delayed
    ACKs, a peer busy starting up), as the kernel reported on loopback: 10.9 ms smoothed,
    0.012 ms minimum."""

    def link_rtt(self) -> tuple[float, float, str]:
        return 0.0109, self.link.rtt_s, "the kernel (smoothed RTT inflated by host delays)"


def test_small_files_start_from_the_paths_minimum_rtt_not_the_host_delayed_smoothed_one():
    link = LinkInfo(rtt_s=0.000012, bandwidth_bps=2e9, source="profiler")
    sim = HostDelayedRTT(link, window_bytes=WINDOW, control_rtts=2, progress_interval=0.25)
    auto = get_algorithm("auto")
    auto.run(table(np.full(20000, 1024)), UNKNOWN_SSH, sim)
    fc = auto.last_algorithm
    assert auto.last_decision.algorithm == "first-contact"
    # one window of 1 KiB files per 0.012 ms is far over 400 Mbit/s: two channels (the floor);
    # sized on the 10.9 ms smoothed RTT the start was the cap, 32
    assert "start at cc 2 " in fc.notes[1], fc.notes
    assert fc.learned["rtt_ms"] == pytest.approx(10.9) and fc.learned["min_rtt_ms"] == pytest.approx(0.012)


def test_holds_once_the_gain_stops_on_a_steady_link():
    sim = simulator(0.05, 400.0)
    auto = get_algorithm("auto")
    auto.run(table(np.full(300, 8 * MB)), UNKNOWN_SSH, sim)
    ramp = auto.last_algorithm.ramp
    settled = [s for s in ramp.steps if s.at > 0]
    after = [s.cc for s in settled[settled.index(next(s for s in settled if "back" in s.action)) + 1 :]]
    assert after and set(after) == {ramp.settled_cc}, [(s.cc, s.action) for s in ramp.steps]


def test_comes_down_when_the_rate_drops():
    # 800 -> 100 Mbit/s at 20 s, on a router with a 2 MiB queue: the channels the fast link
    # needed now put several times what the path holds in flight, and losses follow
    sim = simulator(0.1, 800.0, rate_changes=[(20.0, 100e6)], queue_bytes=WINDOW)
    auto = get_algorithm("auto")
    auto.run(table(np.full(300, 8 * MB)), UNKNOWN_SSH, sim)
    ramp = auto.last_algorithm.ramp
    assert any("drifted" in s.action for s in ramp.steps), [(s.at, s.cc, s.action) for s in ramp.steps]
    peak_cc = max(s.cc for s in ramp.steps if s.at < 20.0)
    assert ramp.cc < peak_cc, [(round(s.at, 1), s.cc, round(s.rate_bps / 1e6), s.action) for s in ramp.steps]


def test_no_class_of_small_files_runs_alone_on_one_channel():
    sizes = np.concatenate([np.full(2000, 16 << 10), np.full(30, 64 * MB)])
    sim = simulator(0.05, 500.0)
    get_algorithm("first-contact").run(table(sizes), UNKNOWN_SSH, sim)
    started = [c for c in sim.calls]
    assert {c.chunk_id for c in started} == {"fc.small", "fc.huge"}
    assert all(c.params.cc >= 1 for c in started)
    first_moves = sim.calls  # both classes moved at the same time from t = 0
    assert all(c.at == 0.0 for c in first_moves)


def test_a_second_copy_starts_where_the_first_settled():
    sim = simulator(0.1, 800.0)
    first = get_algorithm("auto")
    first.run(table(np.full(300, 8 * MB)), UNKNOWN_SSH, sim)
    learned = first.last_algorithm.learned
    assert learned["cc"] >= 4 and learned["rtt_ms"] == pytest.approx(100.0) and learned["rate_mbit"] > 500
    link = LinkInfo(
        rtt_s=learned["rtt_ms"] / 1000,
        bandwidth_bps=learned["rate_mbit"] * 1e6,
        file_rtts=2,
        channel_window_bytes=WINDOW,
        source="library",
        learned_cc=learned["cc"],
    )
    second = get_algorithm("auto")
    sim2 = simulator(0.1, 800.0)
    second.run(table(np.full(300, 8 * MB)), link, sim2)
    assert second.last_decision.algorithm == "first-contact" and "hold cc" in second.last_decision.reason
    assert second.last_algorithm.ramp.steps[0].cc == learned["cc"]
    assert sim2.now <= sim.now * 1.02  # no slower than the copy that had to find it


def test_the_ramp_opens_the_next_levels_connections_ahead_and_measures_them_sooner():
    # 150 ms, 800 Mbit/s, small files: the ramp climbs several levels, each doubling's
    # connections opened while the level before it is measured
    sizes = np.full(6000, 128 << 10)
    warmed_sim = simulator(0.15, 800.0, setup_rtts=14.0)
    fc = get_algorithm("first-contact")
    fc.run(table(sizes), UNKNOWN_SSH, warmed_sim)
    assert warmed_sim.warmed[0] == (0.0, 3)  # the least start's two and the verifier's, with the RTT probe
    assert len(warmed_sim.warmed) > 1, "no connection was opened ahead"
    start = fc.ramp.steps[0].cc
    assert warmed_sim.warmed[1][1] == start  # at the start level, the channels its doubling adds

    class NoWarm(LinkSimulator):
        warm = None  # an executor that cannot open connections ahead

    cold_sim = NoWarm(
        LinkInfo(rtt_s=0.15, bandwidth_bps=800e6, source="profiler"),
        window_bytes=WINDOW,
        control_rtts=2,
        progress_interval=0.25,
        setup_rtts=14.0,
    )
    slow = get_algorithm("first-contact")
    slow.run(table(sizes), UNKNOWN_SSH, cold_sim)
    # the doubled level is measured once its slow start is over, not after handshakes as well:
    # (12 - 3) round trips of 150 ms sooner
    assert fc.ramp.steps[0].action == slow.ramp.steps[0].action == "gained: doubled"
    warmed_gap = fc.ramp.steps[1].at - fc.ramp.steps[0].at
    cold_gap = slow.ramp.steps[1].at - slow.ramp.steps[0].at
    assert warmed_gap <= cold_gap - 1.0, (warmed_gap, cold_gap)


def test_a_link_one_channel_fills_settles_on_one_channel_for_large_files_only():
    # 120 ms, 100 Mbit/s: one 2 MiB window per RTT (140 Mbit/s) is more than the link
    large = np.full(20, 32 * MB)
    fc = get_algorithm("first-contact")
    fc.run(table(large), UNKNOWN_SSH, simulator(0.12, 100.0, queue_bytes=WINDOW))
    assert fc.ramp.floor == 1
    learned = fc.learned
    link = LinkInfo(
        rtt_s=0.12, bandwidth_bps=100e6, file_rtts=2, channel_window_bytes=WINDOW, source="library", learned_cc=1
    )
    second = get_algorithm("first-contact")
    second.run(table(large), link, simulator(0.12, 100.0, queue_bytes=WINDOW))
    assert second.ramp.steps[0].cc == 1, (learned, second.notes)
    # a copy that settled on more channels of large files than windows its rate needs starts at those
    # (120 ms x 100 Mbit/s x 1.25 = 1.9 MB: one 2 MiB window)
    wide = dataclasses.replace(link, learned_cc=4)
    fourth = get_algorithm("first-contact")
    fourth.run(table(large), wide, simulator(0.12, 100.0, queue_bytes=WINDOW))
    assert fourth.ramp.steps[0].cc == 1 and "window(s) per RTT" in fourth.notes[1], fourth.notes
    # where more than one window is needed, the level learned stands (fewer files than channels at the
    # end still use the extra ones)
    fast = dataclasses.replace(link, rtt_s=0.04, bandwidth_bps=800e6, learned_cc=4)  # 5 MB: 3 windows
    fifth = get_algorithm("first-contact")
    fifth.run(table(large), fast, simulator(0.04, 800.0))
    assert fifth.ramp.steps[0].cc == 4, fifth.notes
    # with small files in the mix the floor stays at two, whatever was learned
    mixed = np.concatenate([np.full(500, 64 << 10), large])
    third = get_algorithm("first-contact")
    third.run(table(mixed), link, simulator(0.12, 100.0, queue_bytes=WINDOW))
    assert third.ramp.floor == 2 and third.ramp.steps[0].cc == 2


def test_the_plan_uses_the_window_as_the_bdp():
    sizes = np.concatenate([np.full(100, 64 << 10), np.full(10, 100 * MB)])
    specs = get_algorithm("first-contact").plan(table(sizes), UNKNOWN_SSH)
    by_name = {s.id: s for s in specs}
    assert set(by_name) == {"fc.small", "fc.huge"}
    # pp keeps one 2 MiB window in flight per channel for two control round trips a file
    assert by_name["fc.small"].params.pp == 32 + 1 and by_name["fc.huge"].params.pp == 2
    assert all(s.params.p == 1 for s in specs)
    clink = contact_link(0.05, UNKNOWN_SSH)
    assert clink.bdp_bytes == pytest.approx(WINDOW, rel=0.01)


# -- the engine: a real sshd ---------------------------------------------------------------------


def test_link_rtt_comes_from_the_connection(sshd):
    from airflow_transfer.protocols.pool import SFTPPool

    pool = SFTPPool(sshd.target())
    try:
        rtt, low, how = pool.rtt()
    finally:
        pool.close()
    assert 0 < low <= rtt < 0.5 and "TCP_INFO" in how


def test_link_rtt_over_the_openssh_client_uses_sftp_round_trips(sshd):
    from airflow_transfer.protocols.pool import SFTPPool

    pool = SFTPPool(sshd.target(client="openssh"))
    try:
        rtt, low, how = pool.rtt()
    finally:
        pool.close()
    assert 0 < low <= rtt < 0.5 and "SFTP round trips" in how and pool.client == "openssh"


def test_first_contact_is_kept_and_the_next_copy_starts_from_it(sshd, remote_dir, local_dir, tmp_path):
    url = f"sqlite:///{tmp_path / 'library.db'}"
    env = {"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": url}
    for i in range(40):
        (local_dir / f"f{i:02d}.bin").write_bytes(bytes([i]) * (50_000 + 1000 * i))
    res = run_cli("copy", str(local_dir), sshd.url(f"{remote_dir}/1"), "--json", *ssh_args(sshd), env=env)
    assert res.code == 0, res.err
    tuning = res.summary["tuning"]
    assert tuning["source"] == "first contact (measured by this copy)", tuning
    notes = "\n".join(tuning["notes"])
    assert "auto chose first-contact" in notes and "RTT" in notes and "TCP_INFO" in notes, notes
    assert "first contact: start at cc" in notes and "kept in the tuning library" in notes, notes
    with Store.open(url) as store:
        row = store.tuned_for("localhost", f"{sshd.host}:{sshd.port}", "sftp")
    assert row is not None and row["params"]["method"] == "first contact" and row["cc"] >= 2 and row["rtt_ms"] > 0

    again = run_cli("copy", str(local_dir), sshd.url(f"{remote_dir}/2"), "--json", *ssh_args(sshd), env=env)
    assert again.code == 0, again.err
    tuning = again.summary["tuning"]
    assert tuning["source"].startswith("library (measured ") and tuning["library_id"] == row["id"], tuning
    assert f"hold cc {row['cc']}" in "\n".join(tuning["notes"]), tuning["notes"]
    for i in range(40):
        assert (remote_dir / "2" / f"f{i:02d}.bin").read_bytes() == (local_dir / f"f{i:02d}.bin").read_bytes()


def test_a_first_contact_row_is_not_taken_for_a_measurement_by_model_based_algorithms(tmp_path):
    from airflow_transfer.protocols.endpoint import Endpoint
    from airflow_transfer.protocols.ssh import SSHTarget
    from airflow_transfer.tuning.library import choose, remember_first_contact

    src = Endpoint("file", "/data")
    dst = Endpoint("sftp", "/srv/in", SSHTarget(host="far.example.org", port=22, username="u"))
    with Store.open(f"sqlite:///{tmp_path / 'lib.db'}") as store:
        kept = remember_first_contact(store, src, dst, {"rtt_ms": 40.0, "rate_mbit": 6.0, "cc": 4, "pp_level": 8})
        assert kept and "cc 4" in kept
        for algorithm in ("auto", "first-contact"):
            start = choose(src, dst, None, store, algorithm=algorithm)
            assert start.link is not None and start.link.learned_cc == 4, algorithm
        for algorithm in ("mc", "pcp", "fixed"):
            start = choose(src, dst, None, store, algorithm=algorithm, measure=False)
            assert start.link is None and any("learned by a first contact" in n for n in start.notes), algorithm


def test_a_copy_over_before_its_first_level_is_measured_opens_no_connection_ahead():
    # wan50 `tiny`: 125 MiB of 64 KiB files at 50 ms, 500 Mbit/s is over in about 3 s, before the
    # start level's settle and 2 s window end; connections opened for a doubling that never comes
    # would each cost a handshake on both ends for nothing.
    sim = simulator(0.05, 500.0, setup_rtts=14.0)
    fc = get_algorithm("first-contact")
    fc.run(table(np.full(2000, 64 << 10)), UNKNOWN_SSH, sim)
    assert not any(s.action.endswith("doubled") for s in fc.ramp.steps), fc.ramp.steps
    assert sim.warmed == [(0.0, 3)], sim.warmed  # the start's two and the verifier's only
    # A copy ten times as long climbs, and opens each doubling's connections ahead as before.
    long_sim = simulator(0.05, 500.0, setup_rtts=14.0)
    climbing = get_algorithm("first-contact")
    climbing.run(table(np.full(20000, 64 << 10)), UNKNOWN_SSH, long_sim)
    assert len(long_sim.warmed) > 1, long_sim.warmed


# -- bundled classes: no more channels than bundles can use (Multi-Chunk's rule, on the rate seen) --

# (name, RTT s, best rate seen bit/s, cores, channels) - rates of cc 2 in the 2026-11-29 oracle sweep
BUNDLE_SCENARIOS = [
    ("lan tiny, 2 cores: one window carries it, plus one", 0.001, 506.8e6, 2, 2),
    ("wan50 tiny, 2 cores: two windows, plus one", 0.05, 298.6e6, 2, 3),
    ("wan100 tiny, 2 cores: two windows, plus one", 0.1, 187.6e6, 2, 3),
    ("loopback, nothing measured yet: one per core", 0.00002, 0.0, 2, 2),
    ("lan, 16 cores: one per core", 0.001, 506.8e6, 16, 16),
]


def _classes(sizes, rtt_s: float):
    clink = contact_link(rtt_s, UNKNOWN_SSH)
    return FirstContact().classes(SortedSizes.of(np.sort(np.asarray(sizes, dtype=np.int64))), clink), clink


@pytest.mark.parametrize("name,rtt,rate,cores,want", BUNDLE_SCENARIOS, ids=[s[0] for s in BUNDLE_SCENARIOS])
def test_bundled_classes_get_the_windows_that_carry_the_rate_seen_plus_one_or_a_channel_per_core(
    name, rtt, rate, cores, want
):
    specs, clink = _classes([64 << 10] * 2000, rtt)
    assert bundle_cap(specs, clink, rate, MB, cores) == want
    assert bundle_cap(specs, clink, rate, 0, cores) == 0  # bundles off (SFTP): no such bound
    with_large, clink = _classes([64 << 10] * 2000 + [8 * MB] * 10, rtt)
    assert bundle_cap(with_large, clink, rate, MB, cores) == 0  # a class over SFTP: no bound either


def test_a_learned_level_above_what_bundles_use_is_not_where_the_next_copy_starts():
    specs, clink = _classes([1 << 10] * 100_000, 0.00002)
    cc, why = FirstContact().start_cc(specs, clink, learned_cc=16, known_rate=77e6, bundled_cap=2)
    assert cc == 2 and why.startswith("the last copy settled at cc 16, but these files travel in bundles")
    assert FirstContact().start_cc(specs, clink, learned_cc=16, known_rate=77e6)[0] == 16  # no bound given


@pytest.mark.parametrize("bundled", [MB, 0])
def test_a_copy_of_bundled_files_never_runs_more_channels_than_bundles_use(monkeypatch, bundled):
    # A link the library knows at cc 16 (a level an earlier, noisier copy left), 2 cores, 1 ms:
    # the bundled copy runs at 2 and keeps 2; with bundles off the learned 16 stands as before.
    monkeypatch.setattr(first_contact, "host_cores", lambda: 2)
    sim_link = LinkInfo(rtt_s=0.001, bandwidth_bps=1e9, source="profiler")
    learned = dataclasses.replace(UNKNOWN_SSH, rtt_s=0.001, bandwidth_bps=77e6, source="library", learned_cc=16)
    algo = get_algorithm("first-contact")
    sim = BundlingSim(sim_link, bundled)
    results = algo.run(size_table([64 << 10] * 4000), learned, sim)
    assert sum(r.files for r in results) == 4000
    levels = {s.cc for s in algo.ramp.steps} | {algo.ramp.cc}
    if bundled:
        assert max(levels) == 2 and algo.learned["cc"] == 2, algo.ramp.steps
        assert "travel in bundles" in algo.notes[1]
        assert sim.warmed[0][1] == 3  # the connections opened with the RTT probe's: 2, and the verifier's
    else:
        assert algo.ramp.steps and algo.ramp.steps[0].cc == 16
        assert sim.warmed[0][1] == 17
