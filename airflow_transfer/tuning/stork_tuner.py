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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.params import DEFAULT_BLOCK_SIZE, TransferParams

HIGH_LATENCY_MS = 10.0  # paper 003 section 4.3: "hops with latency greater than 10 ms"
MIN_TCP_BUFFER = 64 * 1024  # our floor, not the paper's: see decide_tcp_buffer
DEFAULT_MAX_STREAMS = 16
DEFAULT_MAX_PP = 32  # pipelining level cap (paper 000 Alg. 1 max_pp)
_MAX_BLOCK_CANDIDATES = 4096  # bound on the common-block search (pure function, must end)

KIB = 1024


# -- inputs -------------------------------------------------------------------


@dataclass(frozen=True)
class DiskFacts:
    """One direction (read or write) of a disk profile: the best block size and
    the increment that can be added to it at the same performance (0 = none)."""

    best_block: int
    increment: int = 0

    def __post_init__(self) -> None:
        if self.best_block < 1 or self.increment < 0:
            raise ValueError(f"disk facts need best_block >= 1 and increment >= 0 (got {self!r})")


@dataclass(frozen=True)
class HostFacts:
    """What the tuner needs from one host's disk and network (kernel) profiles.

    tcp_rmem_max / tcp_wmem_max: ceilings of kernel buffer autotuning
    (net.ipv4.tcp_rmem / tcp_wmem, third field). rmem_max / wmem_max: ceilings
    of buffers an application sets itself (net.core.rmem_max / wmem_max).
    None = not measured."""

    name: str
    disk_read: DiskFacts | None = None
    disk_write: DiskFacts | None = None
    tcp_rmem_max: int | None = None
    tcp_wmem_max: int | None = None
    rmem_max: int | None = None
    wmem_max: int | None = None


@dataclass(frozen=True)
class PathFacts:
    """One direction of a network path as the network profiler saw it.

    hop_latencies_ms: per-hop latency (RTT increase over the previous hop;
    None entries are hops that did not answer); None when hops could not be
    traced, with the reason in hops_reason."""

    rtt_ms: float | None
    bandwidth_mbit: float | None
    hop_latencies_ms: tuple[float | None, ...] | None = None
    hops_reason: str = ""


@dataclass(frozen=True)
class ProtocolTraits:
    """What the tuner must know about a protocol to tune it.

    client_sets_buffers / server_sets_buffers: whether that end sets
    SO_SNDBUF/SO_RCVBUF itself (then net.core.*mem_max caps the buffer) or
    leaves it to kernel autotuning (then net.ipv4.tcp_*mem's maximum does).
    max_block: largest block the protocol accepts per request (None = no cap)."""

    name: str
    client_sets_buffers: bool = True
    server_sets_buffers: bool = True
    max_block: int | None = None
    note: str = ""


PROTOCOLS: dict[str, ProtocolTraits] = {
    # protocols/ssh.py sets both socket buffers on the client's socket when a
    # TCP buffer is given; sshd never does, so the server end autotunes.
    "sftp": ProtocolTraits(
        "sftp",
        True,
        False,
        DEFAULT_BLOCK_SIZE,
        "OpenSSH refuses SFTP requests above 256 KiB (engine/params.py DEFAULT_BLOCK_SIZE)",
    ),
    "ftp": ProtocolTraits("ftp", True, False),
    "http": ProtocolTraits("http", True, False),
    "https": ProtocolTraits("https", True, False),
    # The paper's model (GridFTP): both ends take the TCP buffer size.
    "generic": ProtocolTraits("generic", True, True),
}


def protocol_traits(protocol: str) -> ProtocolTraits:
    """Known traits, or the paper's model (both ends set buffers, no block cap)."""
    return PROTOCOLS.get(protocol.lower(), ProtocolTraits(protocol.lower(), True, True))


# -- output -------------------------------------------------------------------


@dataclass(frozen=True)
class TunedParameters:
    """Tuned parameters for one direction of one link and one protocol.

    streams: TCP streams (the paper's parallelism). tcp_buffer: bytes per
    stream (0 = leave to kernel autotuning). block_size: bytes per I/O block
    (0 = backend default). bdp_bytes: 0 when unknown. pp_level: paper 000
    pipelining level (files in flight - 1). p: parallel connections for the
    first chunk (= streams). cc: concurrency to start from."""

    source: str
    destination: str
    protocol: str
    streams: int
    tcp_buffer: int
    block_size: int
    bdp_bytes: int
    rtt_ms: float | None
    bandwidth_mbit: float | None
    pp_level: int
    p: int
    cc: int
    reasons: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("streams", "p", "cc", "pp_level"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TunedParameters.{name} must be a whole number >= 1 (got {value!r})")
        for name in ("tcp_buffer", "block_size", "bdp_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TunedParameters.{name} must be a whole number of bytes >= 0 (got {value!r})")
        if not isinstance(self.reasons, tuple):
            object.__setattr__(self, "reasons", tuple(self.reasons))

    @property
    def direction(self) -> str:
        return f"{self.source}->{self.destination}"

    def to_transfer_params(self) -> TransferParams:
        """The engine's knobs; pp counts files in flight, hence level + 1."""
        return TransferParams(
            pp=self.pp_level + 1, p=self.p, cc=self.cc, block_size=self.block_size, tcp_buffer=self.tcp_buffer
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "protocol": self.protocol,
            "streams": self.streams,
            "tcp_buffer": self.tcp_buffer,
            "block_size": self.block_size,
            "bdp_bytes": self.bdp_bytes,
            "rtt_ms": self.rtt_ms,
            "bandwidth_mbit": self.bandwidth_mbit,
            "pp_level": self.pp_level,
            "p": self.p,
            "cc": self.cc,
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TunedParameters:
        try:
            return cls(
                source=str(data["source"]),
                destination=str(data["destination"]),
                protocol=str(data["protocol"]),
                streams=int(data["streams"]),
                tcp_buffer=int(data["tcp_buffer"]),
                block_size=int(data["block_size"]),
                bdp_bytes=int(data["bdp_bytes"]),
                rtt_ms=None if data.get("rtt_ms") is None else float(data["rtt_ms"]),
                bandwidth_mbit=None if data.get("bandwidth_mbit") is None else float(data["bandwidth_mbit"]),
                pp_level=int(data["pp_level"]),
                p=int(data["p"]),
                cc=int(data["cc"]),
                reasons=tuple(str(r) for r in data.get("reasons", ())),
            )
        except KeyError as exc:
            raise ValueError(f"tuned parameters record lacks {exc.args[0]!r}; re-run the tuner") from exc


# -- decisions (each: value, reason) ---------------------------------------------


def _fmt_bytes(n: int) -> str:
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
        f"BDP = {path.bandwidth_mbit:g} Mbit/s x {path.rtt_ms:g} ms = {_fmt_bytes(bdp)} (paper 003 section 4.3)"
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
        (cap, f"{name} = {_fmt_bytes(cap)} on {host.name}")
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
        return streams, f"per-stream share {_fmt_bytes(share)} fits the kernel maximum"
    needed = math.ceil(bdp / limit)
    if needed > 1 and needed % 2:
        needed += 1
    if needed > max_streams:
        return max_streams, (
            f"kernel maximum {_fmt_bytes(limit)} would need {needed} streams to hold the BDP; "
            f"capped at {max_streams}, so the aggregate buffer stays below the BDP "
            "(raise the kernel limits on these hosts)"
        )
    return needed, (
        f"kernel maximum {_fmt_bytes(limit)} is below BDP / {streams} = {_fmt_bytes(share)}: "
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
        return limit, f"TCP buffer {_fmt_bytes(limit)}: BDP / {streams} is above the kernel maximum, capped there"
    floor = min(min_buffer, limit) if limit is not None else min_buffer
    if per_stream < floor:
        return floor, (
            f"BDP / {streams} = {_fmt_bytes(per_stream)} is below {_fmt_bytes(floor)}: raised to "
            "that floor (an explicit buffer smaller than the default window slows TCP down)"
        )
    if streams == 1:
        return per_stream, f"TCP buffer = BDP = {_fmt_bytes(per_stream)} (paper 003 section 4.3)"
    return per_stream, (f"TCP buffer = BDP / {streams} streams = {_fmt_bytes(per_stream)} (paper 003 section 4.3)")


def _smallest_at_least(disk: DiskFacts, floor: int) -> int | None:
    """Smallest best + k x increment (k >= 0) that is >= floor; None when no
    increment was measured and the best block is below the floor."""
    if disk.best_block >= floor:
        return disk.best_block
    if not disk.increment:
        return None
    steps = math.ceil((floor - disk.best_block) / disk.increment)
    return disk.best_block + steps * disk.increment


def _in_progression(value: int, disk: DiskFacts) -> bool:
    if value < disk.best_block:
        return False
    if value == disk.best_block:
        return True
    return bool(disk.increment) and (value - disk.best_block) % disk.increment == 0


def _common_block(a: DiskFacts, b: DiskFacts, floor: int) -> int | None:
    """Smallest size >= floor reachable from both ends' best block by their increments."""
    if not a.increment and b.increment:
        a, b = b, a
    start = _smallest_at_least(a, max(floor, b.best_block))
    if start is None:
        return None
    if not a.increment:
        return start if _in_progression(start, b) else None
    for k in range(_MAX_BLOCK_CANDIDATES):
        candidate = start + k * a.increment
        if _in_progression(candidate, b):
            return candidate
    return None


def decide_block_size(
    source_read: DiskFacts | None, dest_write: DiskFacts | None, tcp_buffer: int, traits: ProtocolTraits
) -> tuple[int, list[str]]:
    """Paper 003 section 4.3: block size >= TCP buffer, stepping by the disk
    profiler's increment, one size good for the source's reads and the
    destination's writes; then the protocol's own cap."""
    block, reasons = _block_for_disks(source_read, dest_write, tcp_buffer)
    if traits.max_block is not None and block > traits.max_block:
        reasons.append(
            f"{traits.name}: block capped at {_fmt_bytes(traits.max_block)}"
            + (f" ({traits.note})" if traits.note else "")
            + "; pipelined requests keep the window full instead"
        )
        return traits.max_block, reasons
    return block, reasons


def _block_for_disks(
    source_read: DiskFacts | None, dest_write: DiskFacts | None, tcp_buffer: int
) -> tuple[int, list[str]]:
    ends = [(label, d) for label, d in (("source read", source_read), ("destination write", dest_write)) if d]
    if not ends:
        if not tcp_buffer:
            return 0, ["no disk profile and no TCP buffer: block size left to the backend (0)"]
        return tcp_buffer, [
            f"no disk profile: block size = TCP buffer {_fmt_bytes(tcp_buffer)} "
            "(paper 003 section 4.3: at least the TCP buffer)"
        ]
    if len(ends) == 1:
        label, disk = ends[0]
        return _one_end(label, disk, tcp_buffer)
    common = _common_block(source_read, dest_write, tcp_buffer)
    if common is not None:
        return common, [
            f"block {_fmt_bytes(common)}: the smallest size >= the TCP buffer "
            f"({_fmt_bytes(tcp_buffer)}) that both the source read profile "
            f"({_fmt_bytes(source_read.best_block)} + k x {_fmt_bytes(source_read.increment)}) and the "
            f"destination write profile ({_fmt_bytes(dest_write.best_block)} + k x "
            f"{_fmt_bytes(dest_write.increment)}) rate as optimal (paper 003 sections 3.2, 4.3)"
        ]
    picks = [_one_end(label, disk, tcp_buffer) for label, disk in ends]
    block = max(pick[0] for pick in picks)
    return block, [
        f"no block size >= {_fmt_bytes(tcp_buffer)} is optimal at both ends; using "
        f"{_fmt_bytes(block)}, the larger of the two ends' choices"
    ] + [r for pick in picks for r in pick[1]]


def _one_end(label: str, disk: DiskFacts, tcp_buffer: int) -> tuple[int, list[str]]:
    if disk.best_block >= tcp_buffer:
        return disk.best_block, [
            f"block {_fmt_bytes(disk.best_block)}: the {label} profile's best, already >= the TCP buffer"
        ]
    stepped = _smallest_at_least(disk, tcp_buffer)
    if stepped is None:
        return tcp_buffer, [
            f"block raised to the TCP buffer {_fmt_bytes(tcp_buffer)}: the {label} profile's "
            f"best {_fmt_bytes(disk.best_block)} is smaller and no increment was measured"
        ]
    return stepped, [
        f"block {_fmt_bytes(stepped)}: {label} best {_fmt_bytes(disk.best_block)} + increments of "
        f"{_fmt_bytes(disk.increment)} until >= the TCP buffer {_fmt_bytes(tcp_buffer)} "
        "(paper 003 section 4.3)"
    ]


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
        f"pipelining level ceil(BDP / mean file size {_fmt_bytes(int(mean_file_size))}) - 1 = {raw}{clamp} "
        "(paper 000 eq. 4)"
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


# -- from profiler JSON --------------------------------------------------------------


def host_facts(name: str, disk: Mapping[str, Any] | None = None, network: Mapping[str, Any] | None = None) -> HostFacts:
    """HostFacts from the JSON of profilers/disk.py and profilers/network.py run
    on that host (failed or missing profiles leave fields None)."""
    read = write = None
    if disk and disk.get("ok"):
        read = _disk_side(disk.get("read"))
        write = _disk_side(disk.get("write"))
    kernel = (network or {}).get("kernel") or {}
    if not kernel.get("available"):
        kernel = {}
    return HostFacts(
        name=name,
        disk_read=read,
        disk_write=write,
        tcp_rmem_max=_third(kernel.get("tcp_rmem")),
        tcp_wmem_max=_third(kernel.get("tcp_wmem")),
        rmem_max=kernel.get("rmem_max"),
        wmem_max=kernel.get("wmem_max"),
    )


def path_facts(network: Mapping[str, Any], direction: str = "send") -> PathFacts:
    """PathFacts from the network profiler's client JSON. direction "send" is
    the client host -> sink host, "recv" the reverse."""
    if direction not in ("send", "recv"):
        raise ValueError(f"direction must be 'send' or 'recv' (got {direction!r})")
    rtt = network.get("rtt") or {}
    bandwidth = (network.get("bandwidth") or {}).get(direction) or {}
    hops = network.get("hops") or {}
    latencies: tuple[float | None, ...] | None = None
    reason = ""
    if hops.get("available"):
        latencies = tuple(h.get("latency_ms") for h in hops.get("hops", ()))
    else:
        reason = str(hops.get("reason") or "no hop data")
    return PathFacts(
        rtt_ms=rtt.get("median_ms") if rtt.get("available") else None,
        bandwidth_mbit=bandwidth.get("mbit") if bandwidth.get("available") else None,
        hop_latencies_ms=latencies,
        hops_reason=reason,
    )


def _disk_side(side: Mapping[str, Any] | None) -> DiskFacts | None:
    if not side or not side.get("best_block"):
        return None
    return DiskFacts(best_block=int(side["best_block"]), increment=int(side.get("increment") or 0))


def _third(values: Iterable[int] | None) -> int | None:
    values = list(values or ())
    return int(values[2]) if len(values) >= 3 else None
