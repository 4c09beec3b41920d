"""The Stork parameter tuner's rules (Kola, Kosar, Livny 2003, section 4.3)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_transfer.engine.params import DEFAULT_BLOCK_SIZE, TransferParams
from airflow_transfer.tuning.stork_tuner import (
    MIN_TCP_BUFFER,
    DiskFacts,
    HostFacts,
    PathFacts,
    TunedParameters,
    bandwidth_delay_product,
    decide_block_size,
    decide_tcp_buffer,
    host_facts,
    kernel_buffer_limit,
    path_facts,
    protocol_traits,
    round_streams_even,
    starting_pp_level,
    streams_for_kernel_limit,
    streams_from_hops,
    tune_direction,
    tune_link,
)

KIB = 1024
MIB = 1024 * 1024
GENERIC = protocol_traits("generic")


def host(
    name: str, *, read: DiskFacts | None = None, write: DiskFacts | None = None, limit: int | None = 64 * MIB
) -> HostFacts:
    return HostFacts(
        name, disk_read=read, disk_write=write, tcp_rmem_max=limit, tcp_wmem_max=limit, rmem_max=limit, wmem_max=limit
    )


def path_for_bdp(bdp: int, rtt_ms: float = 100.0, hops: tuple = (1.0,)) -> PathFacts:
    """A path whose bandwidth x RTT is exactly `bdp` bytes."""
    return PathFacts(rtt_ms=rtt_ms, bandwidth_mbit=bdp * 8 / (rtt_ms / 1000.0) / 1e6, hop_latencies_ms=hops)


# -- streams ----------------------------------------------------------------------


def test_three_hops_over_10_ms_give_four_streams():
    path = PathFacts(rtt_ms=60.0, bandwidth_mbit=100.0, hop_latencies_ms=(0.3, 12.0, 2.0, 25.0, 11.0, 0.5))
    streams, why = streams_from_hops(path)
    assert streams == 3
    assert "3 hop(s)" in why and "10 ms" in why
    even, why = round_streams_even(streams)
    assert even == 4 and "odd" in why
    tuned = tune_direction(host("x"), host("y"), path, protocol="generic")
    assert tuned.streams == 4 and tuned.p == 4


@pytest.mark.parametrize(
    "latencies, expected",
    [
        ((0.2, 0.4, 9.9), 1),  # nothing above 10 ms: still one stream
        ((10.0,), 1),  # exactly 10 ms is not "greater than"
        ((11.0,), 1),
        ((11.0, 40.0), 2),
        ((11.0, 12.0, 13.0, 14.0, 15.0), 6),
        ((None, 30.0, None), 1),  # unanswered hops do not count
    ],
)
def test_streams_are_one_per_high_latency_hop_rounded_to_even(latencies, expected):
    path = PathFacts(rtt_ms=50.0, bandwidth_mbit=10.0, hop_latencies_ms=latencies)
    assert tune_direction(host("x"), host("y"), path, protocol="generic").streams == expected


def test_untraced_path_counts_as_one_hop_and_says_why():
    path = PathFacts(
        rtt_ms=80.0,
        bandwidth_mbit=10.0,
        hop_latencies_ms=None,
        hops_reason="neither traceroute nor tracepath is installed",
    )
    streams, why = streams_from_hops(path)
    assert streams == 1
    assert "unavailable" in why and "traceroute" in why


# -- TCP buffer and kernel limits ---------------------------------------------------


def test_tcp_buffer_is_the_bdp_split_over_the_streams():
    bdp = 12 * MIB
    path = path_for_bdp(bdp, hops=(15.0, 20.0))
    tuned = tune_direction(host("x"), host("y"), path, protocol="generic")
    assert tuned.bdp_bytes == bdp
    assert tuned.streams == 2
    assert tuned.tcp_buffer == bdp // 2


def test_kernel_maximum_below_the_per_stream_share_adds_streams():
    # 1000 Mbit/s x 80 ms = 10 MB; one high-latency hop -> 1 stream wanting a 10 MB
    # buffer, but the kernel allows 4 MiB: ceil(10 MB / 4 MiB) = 3, rounded to 4.
    path = PathFacts(rtt_ms=80.0, bandwidth_mbit=1000.0, hop_latencies_ms=(0.2, 70.0, 0.5))
    x, y = host("x", limit=4 * MIB), host("y", limit=4 * MIB)
    tuned = tune_direction(x, y, path, protocol="generic")
    assert tuned.bdp_bytes == 10_000_000
    assert tuned.streams == 4
    assert tuned.tcp_buffer == 2_500_000
    assert tuned.tcp_buffer * tuned.streams >= tuned.bdp_bytes
    assert any("kernel maximum" in r and "add up to the BDP" in r for r in tuned.reasons)
    # the same path with a roomy kernel keeps the single stream
    assert tune_direction(host("x"), host("y"), path, protocol="generic").streams == 1


def test_stream_increase_is_capped_and_says_the_aggregate_falls_short():
    streams, why = streams_for_kernel_limit(bdp=100 * MIB, streams=1, limit=1 * MIB, max_streams=16)
    assert streams == 16
    assert "capped at 16" in why
    buffer, why = decide_tcp_buffer(100 * MIB, streams, 1 * MIB)
    assert buffer == 1 * MIB and "kernel maximum" in why


def test_kernel_limit_depends_on_who_sets_the_buffers():
    sender = HostFacts("s", tcp_wmem_max=32 * MIB, wmem_max=1 * MIB)
    receiver = HostFacts("r", tcp_rmem_max=6 * MIB, rmem_max=2 * MIB)
    assert kernel_buffer_limit(sender, receiver, True, True)[0] == 1 * MIB
    assert kernel_buffer_limit(sender, receiver, False, False)[0] == 6 * MIB
    limit, why = kernel_buffer_limit(sender, receiver, False, True)
    assert limit == 2 * MIB and "net.core.rmem_max" in why and "on r" in why
    assert kernel_buffer_limit(HostFacts("a"), HostFacts("b"), True, True)[0] is None


def test_sftp_server_end_autotunes_so_directions_differ():
    # sftp: the client (worker) sets SO_*BUF, sshd does not. The worker may send with
    # 32 MiB buffers but receive with only 1 MiB (net.core.rmem_max); the server
    # autotunes up to 32 MiB both ways. BDP = 500 Mbit/s x 50 ms = 3.125 MB.
    worker = HostFacts("worker", tcp_rmem_max=32 * MIB, tcp_wmem_max=32 * MIB, rmem_max=1 * MIB, wmem_max=32 * MIB)
    server = HostFacts("server", tcp_rmem_max=32 * MIB, tcp_wmem_max=32 * MIB, rmem_max=64 * KIB, wmem_max=64 * KIB)
    path = PathFacts(rtt_ms=50.0, bandwidth_mbit=500.0, hop_latencies_ms=(30.0,))
    up, down = tune_link(worker, server, path, protocols=("sftp",), client="worker")
    assert (up.direction, down.direction) == ("worker->server", "server->worker")
    assert up.streams == 1 and up.tcp_buffer == 3_125_000  # server's 64 KiB rmem_max is not used
    assert down.streams == 4 and down.tcp_buffer <= 1 * MIB  # the worker's receive cap bites
    assert any("net.core.rmem_max" in r and "on worker" in r for r in down.reasons)
    # treating both ends as buffer-setting clients (client=None) brings in the server's 64 KiB cap
    assert tune_link(worker, server, path, protocols=("sftp",))[0].streams == 16


def test_short_paths_get_the_buffer_floor_and_unknown_bdp_leaves_autotuning():
    buffer, why = decide_tcp_buffer(bdp=12_500, streams=1, limit=4 * MIB)
    assert buffer == MIN_TCP_BUFFER and "floor" in why
    tuned = tune_direction(host("x"), host("y"), PathFacts(rtt_ms=None, bandwidth_mbit=900.0), protocol="generic")
    assert tuned.bdp_bytes == 0 and tuned.tcp_buffer == 0
    assert any("BDP unknown" in r for r in tuned.reasons)
    assert bandwidth_delay_product(PathFacts(rtt_ms=10.0, bandwidth_mbit=None))[0] == 0


# -- block size ----------------------------------------------------------------------


def test_paper_example_block_1024k_increment_512k_buffer_1536k_gives_1536k():
    disk = DiskFacts(best_block=1024 * KIB, increment=512 * KIB)
    block, reasons = decide_block_size(disk, disk, 1536 * KIB, GENERIC)
    assert block == 1536 * KIB
    assert reasons and "paper 003" in reasons[0]
    # end to end: a single-stream path whose BDP is 1536 KiB
    x = host("x", read=disk, write=disk)
    y = host("y", read=disk, write=disk)
    tuned = tune_direction(x, y, path_for_bdp(1536 * KIB, hops=(30.0,)), protocol="generic")
    assert (tuned.streams, tuned.tcp_buffer, tuned.block_size) == (1, 1536 * KIB, 1536 * KIB)


def test_block_never_below_the_tcp_buffer_and_best_kept_when_already_larger():
    disk = DiskFacts(best_block=4 * MIB, increment=1 * MIB)
    assert decide_block_size(disk, None, 1536 * KIB, GENERIC)[0] == 4 * MIB
    small = DiskFacts(best_block=256 * KIB, increment=0)
    block, reasons = decide_block_size(small, None, 1000 * KIB, GENERIC)
    assert block == 1000 * KIB and "no increment" in reasons[0]
    stepped = DiskFacts(best_block=1 * MIB, increment=768 * KIB)
    assert decide_block_size(None, stepped, 2 * MIB, GENERIC)[0] == 1 * MIB + 2 * 768 * KIB


def test_one_block_size_good_for_both_ends():
    source_read = DiskFacts(best_block=1024 * KIB, increment=512 * KIB)  # 1024, 1536, 2048, ...
    dest_write = DiskFacts(best_block=768 * KIB, increment=384 * KIB)  # 768, 1152, 1536, ...
    block, reasons = decide_block_size(source_read, dest_write, 1100 * KIB, GENERIC)
    assert block == 1536 * KIB
    assert "both" in reasons[0]
    # no common size: take the larger of the two ends' own choices and say so
    block, reasons = decide_block_size(DiskFacts(1 * MIB, 0), DiskFacts(3 * MIB, 0), 512 * KIB, GENERIC)
    assert block == 3 * MIB and "no block size" in reasons[0]


def test_sftp_caps_the_block_at_what_openssh_accepts():
    disk = DiskFacts(best_block=1024 * KIB, increment=512 * KIB)
    block, reasons = decide_block_size(disk, disk, 1536 * KIB, protocol_traits("sftp"))
    assert block == DEFAULT_BLOCK_SIZE
    assert "sftp" in reasons[-1] and "capped" in reasons[-1]


def test_no_disk_profile_uses_the_tcp_buffer_or_the_backend_default():
    assert decide_block_size(None, None, 2 * MIB, GENERIC)[0] == 2 * MIB
    assert decide_block_size(None, None, 0, GENERIC)[0] == 0


# -- directions, protocols, pipelining -----------------------------------------------


def test_results_per_direction_and_protocol_use_each_ends_disk():
    x = host("x", read=DiskFacts(2 * MIB, 1 * MIB), write=DiskFacts(64 * KIB, 64 * KIB))
    y = host("y", read=DiskFacts(128 * KIB, 128 * KIB), write=DiskFacts(4 * MIB, 0))
    xy = path_for_bdp(256 * KIB, hops=(20.0,))
    yx = dataclasses.replace(xy, bandwidth_mbit=xy.bandwidth_mbit / 2)
    results = tune_link(x, y, xy, yx, protocols=("generic", "sftp"))
    assert [(r.protocol, r.direction) for r in results] == [
        ("generic", "x->y"),
        ("generic", "y->x"),
        ("sftp", "x->y"),
        ("sftp", "y->x"),
    ]
    gen_xy, gen_yx, sftp_xy, _ = results
    assert gen_xy.block_size == 4 * MIB  # x reads at 2 MiB + k MiB, y writes only at 4 MiB
    assert gen_yx.block_size == 128 * KIB  # y reads 128 KiB steps, x writes 64 KiB steps, buffer 128 KiB
    assert gen_yx.bdp_bytes == gen_xy.bdp_bytes // 2
    assert sftp_xy.block_size == DEFAULT_BLOCK_SIZE


@pytest.mark.parametrize(
    "mean, expected",
    [
        (1 * MIB, 9),  # ceil(10 MB / 1 MiB) - 1 = 9
        (100 * MIB, 1),  # files larger than the BDP: clamped up to 1
        (1000, 32),  # tiny files: clamped to max_pp
        (None, 1),
    ],
)
def test_starting_pipelining_level_from_the_mean_file_size(mean, expected):
    assert starting_pp_level(10_000_000, mean, max_pp=32)[0] == expected
    path = PathFacts(rtt_ms=80.0, bandwidth_mbit=1000.0, hop_latencies_ms=(30.0,))
    tuned = tune_direction(host("x"), host("y"), path, protocol="generic", mean_file_size=mean)
    assert tuned.pp_level == expected
    assert tuned.cc == 1 and tuned.p == tuned.streams


# -- the output record -----------------------------------------------------------------


def test_tuned_parameters_round_trip_through_plain_values():
    disk = DiskFacts(1024 * KIB, 512 * KIB)
    tuned = tune_direction(
        host("x", read=disk),
        host("y", write=disk),
        path_for_bdp(3 * MIB, hops=(12.0, 14.0, 30.0)),
        protocol="generic",
        mean_file_size=256 * KIB,
    )
    data = json.loads(json.dumps(tuned.to_dict()))
    assert TunedParameters.from_dict(data) == tuned
    assert isinstance(data["reasons"], list) and len(data["reasons"]) >= 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        tuned.streams = 2  # type: ignore[misc]
    params = tuned.to_transfer_params()
    assert isinstance(params, TransferParams)
    assert (params.pp, params.p, params.cc) == (tuned.pp_level + 1, 4, 1)
    assert (params.block_size, params.tcp_buffer) == (tuned.block_size, tuned.tcp_buffer)


def test_tuned_parameters_reject_bad_values_and_incomplete_records():
    good = dict(
        source="a",
        destination="b",
        protocol="sftp",
        streams=1,
        tcp_buffer=0,
        block_size=0,
        bdp_bytes=0,
        rtt_ms=None,
        bandwidth_mbit=None,
        pp_level=1,
        p=1,
        cc=1,
    )
    assert TunedParameters(**good).reasons == ()
    with pytest.raises(ValueError, match="streams"):
        TunedParameters(**dict(good, streams=0))
    with pytest.raises(ValueError, match="tcp_buffer"):
        TunedParameters(**dict(good, tcp_buffer=-1))
    record = dict(good)
    del record["pp_level"]
    with pytest.raises(ValueError, match="pp_level"):
        TunedParameters.from_dict(record)


def test_facts_from_profiler_json():
    disk = {
        "ok": True,
        "read": {"best_block": 1048576, "increment": 524288},
        "write": {"best_block": 262144, "increment": 0},
    }
    network = {
        "kernel": {
            "available": True,
            "tcp_rmem": [4096, 131072, 33554432],
            "tcp_wmem": [4096, 16384, 4194304],
            "rmem_max": 212992,
            "wmem_max": 425984,
        },
        "rtt": {"available": True, "median_ms": 42.5},
        "bandwidth": {"send": {"available": True, "mbit": 880.0}, "recv": {"available": False, "reason": "x"}},
        "hops": {"available": True, "hops": [{"latency_ms": 0.4}, {"latency_ms": None}, {"latency_ms": 35.0}]},
    }
    facts = host_facts("h", disk=disk, network=network)
    assert facts.disk_read == DiskFacts(1048576, 524288)
    assert facts.disk_write == DiskFacts(262144, 0)
    assert (facts.tcp_rmem_max, facts.tcp_wmem_max, facts.rmem_max, facts.wmem_max) == (
        33554432,
        4194304,
        212992,
        425984,
    )
    send = path_facts(network, "send")
    assert (send.rtt_ms, send.bandwidth_mbit, send.hop_latencies_ms) == (42.5, 880.0, (0.4, None, 35.0))
    assert path_facts(network, "recv").bandwidth_mbit is None
    failed = host_facts("h", disk={"ok": False, "error": "boom"}, network={"kernel": {"available": False}})
    assert failed == HostFacts("h")
    untraced = path_facts({"hops": {"available": False, "reason": "light mode"}})
    assert untraced.hop_latencies_ms is None and untraced.hops_reason == "light mode"
