"""Stork parameter tuner: profiler figures -> streams, TCP buffer, block size.

Paper 003 (Kola, Kosar, Livny, Run-time Adaptation of Grid Data Placement Jobs,
2003; docs/papers.md) section 4.3, per direction (X->Y and
Y->X, section 4.4) and per protocol (section 4.3, last paragraph):

1. one stream per hop whose latency exceeds 10 ms (at least one stream);
2. more than one stream and an odd count: add one ("some protocols do not
   work well with odd number of streams");
3. TCP buffer = bandwidth-delay product, divided by the number of streams;
4. when the kernel's maximum buffer is below that per-stream share, use more
   streams so their buffers still add up to the BDP;
5. disk block size at least the TCP buffer, moving from the disk profiler's
   best block in steps of its increment (1024 KiB best + 512 KiB increment
   and a 1536 KiB buffer give 1536 KiB, the paper's example);
6. one block size for both ends: the transfer takes a single block size (as
   globus-url-copy in the paper), so it must be good for the source's reads
   and the destination's writes.

It also proposes a starting point for the tuning algorithms: BDP, p = streams,
cc = 1 and the pipelining level of paper 000 (Yildirim et al., IEEE TCC 2016) eq. 4,
ceil(BDP / mean file size) - 1, clamped to [1, max_pp]. The level counts the
paper's way (level L keeps L + 1 files in flight); `to_transfer_params`
converts it to `TransferParams.pp`, which counts files in flight.

Pure functions, no I/O. Every decision returns its value with the reason, and
`TunedParameters.reasons` carries them so the UI can show why.

The facts and the result are in stork_facts.py, the rules in stork_rules.py,
the block size search in stork_blocks.py; this module composes them and is
where callers import all of it from.
"""

from __future__ import annotations

from collections.abc import Sequence

from .stork_blocks import decide_block_size
from .stork_facts import (
    PROTOCOLS,
    DiskFacts,
    HostFacts,
    PathFacts,
    ProtocolTraits,
    TunedParameters,
    host_facts,
    path_facts,
    protocol_traits,
)
from .stork_rules import (
    DEFAULT_MAX_PP,
    DEFAULT_MAX_STREAMS,
    HIGH_LATENCY_MS,
    KIB,
    MIN_TCP_BUFFER,
    bandwidth_delay_product,
    decide_tcp_buffer,
    kernel_buffer_limit,
    round_streams_even,
    starting_pp_level,
    streams_for_kernel_limit,
    streams_from_hops,
)

# -- composition ------------------------------------------------------------------


def tune_direction(
    source: HostFacts,
    destination: HostFacts,
    path: PathFacts,
    protocol: str = "sftp",
    mean_file_size: float | None = None,
    client: str | None = None,
    max_streams: int = DEFAULT_MAX_STREAMS,
    max_pp: int = DEFAULT_MAX_PP,
    min_tcp_buffer: int = MIN_TCP_BUFFER,
) -> TunedParameters:
    """Tune one direction (source -> destination) of one protocol.

    client: the host that runs the transfer client (the Airflow worker); the
    protocol's traits say whether the client and the server end set socket
    buffers themselves. None treats both ends as clients."""
    traits = protocol_traits(protocol)
    reasons: list[str] = []
    if traits.name not in PROTOCOLS:
        reasons.append(
            f"no protocol-specific rules for {traits.name!r}: the paper's model (both ends set "
            "the TCP buffer, no block cap)"
        )

    streams, why = streams_from_hops(path)
    reasons.append(why)
    streams, why = round_streams_even(streams)
    reasons.append(why)
    bdp, why = bandwidth_delay_product(path)
    reasons.append(why)

    def sets(host: HostFacts) -> bool:
        return traits.client_sets_buffers if client is None or host.name == client else traits.server_sets_buffers

    limit, why = kernel_buffer_limit(source, destination, sets(source), sets(destination))
    reasons.append(why)
    streams, why = streams_for_kernel_limit(bdp, streams, limit, max_streams)
    reasons.append(why)
    tcp_buffer, why = decide_tcp_buffer(bdp, streams, limit, min_tcp_buffer)
    reasons.append(why)
    block, whys = decide_block_size(source.disk_read, destination.disk_write, tcp_buffer, traits)
    reasons.extend(whys)
    pp_level, why = starting_pp_level(bdp, mean_file_size, max_pp)
    reasons.append(why)
    reasons.append(f"p = {streams} (the stream count), cc = 1: the starting point the tuning algorithms adapt")
    return TunedParameters(
        source=source.name,
        destination=destination.name,
        protocol=traits.name,
        streams=streams,
        tcp_buffer=tcp_buffer,
        block_size=block,
        bdp_bytes=bdp,
        rtt_ms=path.rtt_ms,
        bandwidth_mbit=path.bandwidth_mbit,
        pp_level=pp_level,
        p=streams,
        cc=1,
        reasons=tuple(reasons),
    )


def tune_link(
    x: HostFacts,
    y: HostFacts,
    x_to_y: PathFacts,
    y_to_x: PathFacts | None = None,
    protocols: Sequence[str] = ("sftp",),
    mean_file_size: float | None = None,
    client: str | None = None,
    max_streams: int = DEFAULT_MAX_STREAMS,
    max_pp: int = DEFAULT_MAX_PP,
    min_tcp_buffer: int = MIN_TCP_BUFFER,
) -> list[TunedParameters]:
    """Both directions of a link for each protocol (paper 003 section 4.4: 'one
    for transfer from node X to node Y and another for ... Y to node X').
    y_to_x defaults to x_to_y (same RTT and hops; pass the reverse bandwidth
    when it was measured)."""
    reverse = y_to_x if y_to_x is not None else x_to_y
    out = []
    for protocol in protocols:
        for src, dst, path in ((x, y, x_to_y), (y, x, reverse)):
            out.append(
                tune_direction(src, dst, path, protocol, mean_file_size, client, max_streams, max_pp, min_tcp_buffer)
            )
    return out


__all__ = [
    "DEFAULT_MAX_PP",
    "DEFAULT_MAX_STREAMS",
    "HIGH_LATENCY_MS",
    "KIB",
    "MIN_TCP_BUFFER",
    "PROTOCOLS",
    "DiskFacts",
    "HostFacts",
    "PathFacts",
    "ProtocolTraits",
    "TunedParameters",
    "bandwidth_delay_product",
    "decide_block_size",
    "decide_tcp_buffer",
    "host_facts",
    "kernel_buffer_limit",
    "path_facts",
    "protocol_traits",
    "round_streams_even",
    "starting_pp_level",
    "streams_for_kernel_limit",
    "streams_from_hops",
    "tune_direction",
    "tune_link",
]
