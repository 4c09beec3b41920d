"""What the Stork tuner reads and what it returns: host, path and protocol facts in, tuned
parameters out, and the facts read from the profilers' JSON.

Paper 003 (Kola, Kosar, Livny, Run-time Adaptation of Grid Data Placement Jobs,
2003; docs/papers.md) tunes from a disk profile and a network profile of each
host; `host_facts` and `path_facts` take exactly those figures from the JSON of
profilers/disk.py and profilers/network.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.params import DEFAULT_BLOCK_SIZE, TransferParams

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
