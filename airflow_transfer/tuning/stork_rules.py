"""The Stork tuner's rules, paper 003 section 4.3, one decision each: streams, BDP, TCP buffer
and the starting pipelining level. Each returns its value with the reason, in words the UI shows.

The block size, which needs a search over both ends' disk profiles, is in stork_blocks.py.
"""

from __future__ import annotations

import math

from .stork_facts import HostFacts, PathFacts

HIGH_LATENCY_MS = 10.0  # paper 003 section 4.3: "hops with latency greater than 10 ms"
MIN_TCP_BUFFER = 64 * 1024  # our floor, not the paper's: see decide_tcp_buffer
DEFAULT_MAX_STREAMS = 16
DEFAULT_MAX_PP = 32  # pipelining level cap (paper 000 Alg. 1 max_pp)

KIB = 1024


def fmt_bytes(n: int) -> str:
    if n >= KIB * KIB and n % KIB == 0:
        return f"{n / (KIB * KIB):g} MiB ({n} B)"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def streams_from_hops(path: PathFacts) -> tuple[int, str]:
    """Paper 003 section 4.3: one stream per hop with latency over 10 ms, at least one."""
    if path.hop_latencies_ms is None:
        why = path.hops_reason or "not traced"
        return 1, f"hop latencies unavailable ({why}): the path counts as one hop, 1 stream"
    known = [h for h in path.hop_latencies_ms if h is not None]
    high = [h for h in known if h > HIGH_LATENCY_MS]
    silent = len(path.hop_latencies_ms) - len(known)
    note = f"; {silent} hop(s) did not answer" if silent else ""
    if not high:
        return 1, (
            f"no hop of {len(path.hop_latencies_ms)} has latency over {HIGH_LATENCY_MS:g} ms{note}: "
            "1 stream (paper 003 section 4.3)"
        )
    shown = ", ".join(f"{h:g}" for h in high)
    return len(high), (
        f"{len(high)} hop(s) with latency over {HIGH_LATENCY_MS:g} ms ({shown} ms){note}: "
        f"one stream each (paper 003 section 4.3)"
    )


def round_streams_even(streams: int) -> tuple[int, str]:
    """Paper 003 section 4.3: more than one stream and odd -> add one."""
    if streams <= 1:
        return streams, "a single stream needs no even rounding"
    if streams % 2 == 0:
        return streams, f"{streams} streams is already even"
    return streams + 1, (
        f"{streams} streams rounded up to {streams + 1}: some protocols do not work well "
        "with an odd number of streams (paper 003 section 4.3)"
    )


def bandwidth_delay_product(path: PathFacts) -> tuple[int, str]:
    """BDP in bytes from the measured bandwidth and RTT; 0 when either is missing."""
    if path.bandwidth_mbit is None or path.bandwidth_mbit <= 0:
        return 0, "no bandwidth measurement: BDP unknown"
    if path.rtt_ms is None or path.rtt_ms <= 0:
        return 0, "no RTT measurement: BDP unknown"
    bdp = max(1, int(round(path.bandwidth_mbit * 1e6 / 8 * path.rtt_ms / 1000.0)))
    return bdp, (
        f"BDP = {path.bandwidth_mbit:g} Mbit/s x {path.rtt_ms:g} ms = {fmt_bytes(bdp)} (paper 003 section 4.3)"
    )


def kernel_buffer_limit(
    sender: HostFacts, receiver: HostFacts, sender_sets: bool, receiver_sets: bool
) -> tuple[int | None, str]:
    """The largest per-stream buffer the two kernels allow: the sender's send
    side and the receiver's receive side, each by how that end sizes buffers."""
    send_cap = sender.wmem_max if sender_sets else sender.tcp_wmem_max
    recv_cap = receiver.rmem_max if receiver_sets else receiver.tcp_rmem_max
    send_name = "net.core.wmem_max" if sender_sets else "net.ipv4.tcp_wmem max"
    recv_name = "net.core.rmem_max" if receiver_sets else "net.ipv4.tcp_rmem max"
    known = [
        (cap, f"{name} = {fmt_bytes(cap)} on {host.name}")
        for cap, host, name in ((send_cap, sender, send_name), (recv_cap, receiver, recv_name))
        if cap
    ]
    if not known:
        return None, "kernel buffer limits unknown at both ends: no limit applied"
    cap, text = min(known, key=lambda item: item[0])
    return cap, f"kernel maximum buffer {text} (the smaller end)"


def streams_for_kernel_limit(
    bdp: int, streams: int, limit: int | None, max_streams: int = DEFAULT_MAX_STREAMS
) -> tuple[int, str]:
    """Paper 003 section 4.3: when the kernel's maximum buffer is below the
    per-stream share of the BDP, use enough streams that their buffers add up
    to the BDP (then round to even again)."""
    if not bdp:
        return streams, "BDP unknown: stream count not checked against kernel limits"
    if limit is None:
        return streams, "kernel limits unknown: stream count not checked against them"
    share = math.ceil(bdp / streams)
    if share <= limit:
        return streams, f"per-stream share {fmt_bytes(share)} fits the kernel maximum"
    needed = math.ceil(bdp / limit)
    if needed > 1 and needed % 2:
        needed += 1
    if needed > max_streams:
        return max_streams, (
            f"kernel maximum {fmt_bytes(limit)} would need {needed} streams to hold the BDP; "
            f"capped at {max_streams}, so the aggregate buffer stays below the BDP "
            "(raise the kernel limits on these hosts)"
        )
    return needed, (
        f"kernel maximum {fmt_bytes(limit)} is below BDP / {streams} = {fmt_bytes(share)}: "
        f"{needed} streams so their buffers add up to the BDP (paper 003 section 4.3)"
    )


def decide_tcp_buffer(bdp: int, streams: int, limit: int | None, min_buffer: int = MIN_TCP_BUFFER) -> tuple[int, str]:
    """Paper 003 section 4.3: TCP buffer = BDP / streams, within the kernel limit.

    The floor (default 64 KiB) is ours: on short paths BDP / streams can be a
    few KiB, and an explicit buffer that small (setting one turns autotuning
    off) would throttle TCP below what the kernel default gives."""
    if not bdp:
        return 0, "BDP unknown: TCP buffer left to kernel autotuning (0)"
    per_stream = math.ceil(bdp / streams)
    if limit is not None and per_stream > limit:
        return limit, f"TCP buffer {fmt_bytes(limit)}: BDP / {streams} is above the kernel maximum, capped there"
    floor = min(min_buffer, limit) if limit is not None else min_buffer
    if per_stream < floor:
        return floor, (
            f"BDP / {streams} = {fmt_bytes(per_stream)} is below {fmt_bytes(floor)}: raised to "
            "that floor (an explicit buffer smaller than the default window slows TCP down)"
        )
    if streams == 1:
        return per_stream, f"TCP buffer = BDP = {fmt_bytes(per_stream)} (paper 003 section 4.3)"
    return per_stream, (f"TCP buffer = BDP / {streams} streams = {fmt_bytes(per_stream)} (paper 003 section 4.3)")


def starting_pp_level(bdp: int, mean_file_size: float | None, max_pp: int = DEFAULT_MAX_PP) -> tuple[int, str]:
    """Paper 000 eq. 4: level = ceil(BDP / mean file size) - 1, clamped to [1, max_pp]."""
    if mean_file_size is None:
        return 1, "no mean file size given: pipelining level 1, for the tuning algorithm to raise"
    if not bdp:
        return 1, "BDP unknown: pipelining level 1, for the tuning algorithm to raise"
    if mean_file_size <= 0:
        return max_pp, f"empty files are pure round trips: pipelining level {max_pp} (the cap)"
    raw = math.ceil(bdp / mean_file_size) - 1
    level = int(min(max(raw, 1), max_pp))
    clamp = "" if level == raw else f", clamped to [1, {max_pp}]"
    return level, (
        f"pipelining level ceil(BDP / mean file size {fmt_bytes(int(mean_file_size))}) - 1 = {raw}{clamp} "
        "(paper 000 eq. 4)"
    )
