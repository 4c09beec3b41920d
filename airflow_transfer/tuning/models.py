"""Closed-form models the planners use: BDP, optimal pipelining, Mathis bound.

Units: sizes and windows in bytes, times in seconds, rates in bits per second
(`*_bps`) unless a name says otherwise.

Pipelining has two counting conventions, and mixing them up costs a factor
of two on files near the BDP:

* paper 000 (Yildirim, Arslan, Kim, Kosar, Application-Level Optimization of
  Big Data Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC
  2016; docs/papers.md; section 1 and eq. 3) counts GridFTP's
  *pipelining level*: "if the pipelining level is set to four, five
  outstanding commands are issued". A level L keeps L + 1 files in flight, and
  eq. 3 says one RTT then carries FS x (L + 1) bytes.
* our `TransferParams.pp` (engine/params.py) counts *files in flight* on one
  connection; pp = 1 means no pipelining at all.

The planners reason in levels, as the paper does (`pp_level`, `max_pp`), and
convert once with `pp_param` when they build `TransferParams`.

Eq. 4 vs paper 001 eq. 1. Paper 000 eq. 4 gives level = ceil(BDP / FS) - 1,
i.e. ceil(BDP / FS) files in flight: the fewest that put one BDP on the wire
per RTT (eq. 3 with B = BDP). Paper 001 (Kim, Yildirim, Kosar, A Flexible
Client for GridFTP-based Data Scheduling) eq. 1 writes BDP / FS + 1 (6 for
1 MB files at a 5 MB BDP, where eq. 4 gives 4).
We use eq. 4: it is derived from the measured relation eq. 3 (Fig. 2), while
eq. 1 is stated without derivation and keeps two more files outstanding than
fill the pipe - extra server-side opens that buy no bandwidth once the BDP is
covered, and exactly what `max_pp` exists to limit. `pp_level_eq1` is kept
for comparison and for replaying paper 001.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

# Linux's default ceiling for socket send-buffer autotuning (net.ipv4.tcp_wmem
# max = 4 MiB): what a connection gets when nobody measured or set a window.
DEFAULT_MAX_WINDOW = 4 * 1024 * 1024
ETHERNET_MSS = 1448  # 1500 MTU minus IP/TCP headers with timestamps
MATHIS_C = math.sqrt(1.5)  # periodic-loss constant of the Mathis et al. model
DEFAULT_MAX_PP = 32  # pipelining level cap (paper 000 Alg. 1 max_pp)
DEFAULT_MAX_P = 16
DEFAULT_MAX_CC = 32
UNKNOWN_SOURCE = "unknown"
SFTP_FILE_RTTS = 2  # control round trips per file over SFTP: see LinkInfo.file_rtts
# OpenSSH's session channel window (CHAN_SES_WINDOW_DEFAULT, 64 x 32 KiB). The receiving
# sshd advertises it and never grows it, so one SFTP upload connection keeps at most this
# much in flight whatever TCP could: 2 MiB / 50 ms = 335 Mbit/s before overheads.
OPENSSH_CHANNEL_WINDOW = 2 * 1024 * 1024


@dataclass(frozen=True)
class LinkInfo:
    """What we know about the path between source and destination.

    rtt_s: round-trip time in seconds.
    bandwidth_bps: bottleneck bandwidth in bits per second (paper 000 section
        2.1 measures it as the disk-to-disk rate of one bulk TCP stream).
    tcp_buffer_bytes: socket buffer the transfer will set (0 = autotuning).
    max_window_bytes: largest window one connection can reach (kernel limit or
        the engine's bytes-in-flight cap), 0 when unknown.
    loss_rate: packet loss probability, 0 when unknown or lossless.
    source: where the figures came from ("profiler", "library", "cli", ...);
        "unknown" marks guessed figures, which `auto` will not build models on.
    file_rtts: control round trips each file costs one connection that
        pipelining has to hide. Paper 000's model has one (a command and its
        reply: eq. 4 as written). SFTP has two (OPEN must return a handle before
        the first WRITE; the CLOSE's status frees the slot), so the protocol's
        engine sets SFTP_FILE_RTTS and pipelining aims at that many BDPs in flight.
    channel_window_bytes: a flow-control window the protocol itself puts on each
        connection above TCP (SSH's channel window), 0 when there is none. Unlike
        TCP's, it does not grow with the path, so it is known before the first byte
        and the ramps start from the connections it takes to cover the BDP
        (`streams_for_channel_window`).
    learned_cc: the concurrency an earlier first contact over this link settled on
        (tuning/first_contact.py, kept in the tuning library), 0 when none.
    """

    rtt_s: float
    bandwidth_bps: float
    tcp_buffer_bytes: int = 0
    max_window_bytes: int = 0
    loss_rate: float = 0.0
    source: str = "cli"
    file_rtts: int = 1
    channel_window_bytes: int = 0
    learned_cc: int = 0

    def __post_init__(self) -> None:
        for name in ("rtt_s", "bandwidth_bps"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not value > 0
                or not math.isfinite(value)
            ):
                raise ValueError(
                    f"LinkInfo.{name} must be a finite number > 0 (got {value!r}); "
                    "measure the link or pass --rtt-ms/--bandwidth-mbit"
                )
        for name in ("tcp_buffer_bytes", "max_window_bytes", "channel_window_bytes", "learned_cc"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"LinkInfo.{name} must be a whole number >= 0 (got {value!r})")
        if not (0.0 <= self.loss_rate < 1.0):
            raise ValueError(f"LinkInfo.loss_rate must be in [0, 1) (got {self.loss_rate!r})")

    @classmethod
    def from_bdp(cls, bdp_bytes: int, rtt_s: float = 0.1, source: str = "cli") -> LinkInfo:
        """A link known only by its BDP (`plan --bdp`); the RTT is nominal."""
        if isinstance(bdp_bytes, bool) or not isinstance(bdp_bytes, (int, float)) or bdp_bytes <= 0:
            raise ValueError(f"BDP must be a number of bytes > 0 (got {bdp_bytes!r})")
        return cls(rtt_s=rtt_s, bandwidth_bps=bdp_bytes * 8 / rtt_s, source=source)

    @classmethod
    def unknown(cls) -> LinkInfo:
        """Placeholder figures (50 ms, 1 Gbit/s) for a link nobody measured."""
        return cls(rtt_s=0.05, bandwidth_bps=1e9, source=UNKNOWN_SOURCE)

    @property
    def measured(self) -> bool:
        return self.source != UNKNOWN_SOURCE

    @property
    def bdp_bytes(self) -> int:
        return bdp(self.bandwidth_bps, self.rtt_s)

    @property
    def pipeline_bytes(self) -> int:
        """Bytes pipelining keeps in flight on one connection: one BDP per control round trip
        a file costs (eq. 4 of paper 000 with its BDP scaled by `file_rtts`)."""
        return self.bdp_bytes * max(1, self.file_rtts)

    @property
    def window_bytes(self) -> int:
        """Bytes one connection can keep in flight."""
        return effective_window(self)

    def as_dict(self) -> dict:
        return asdict(self)


def bdp(bandwidth_bps: float, rtt_s: float) -> int:
    """Bandwidth-delay product in bytes (paper 000 section 2.1)."""
    if bandwidth_bps <= 0 or rtt_s <= 0:
        raise ValueError(f"bandwidth and RTT must be > 0 (got {bandwidth_bps!r} bit/s, {rtt_s!r} s)")
    return max(1, int(round(bandwidth_bps / 8 * rtt_s)))


def tcp_window(link: LinkInfo) -> int:
    """TCP's per-connection window: the smaller of the known limits, else Linux's default."""
    limits = [w for w in (link.tcp_buffer_bytes, link.max_window_bytes) if w > 0]
    return min(limits) if limits else DEFAULT_MAX_WINDOW


def effective_window(link: LinkInfo) -> int:
    """The per-connection window: TCP's, or the protocol's channel window when that is smaller."""
    window = tcp_window(link)
    return min(window, link.channel_window_bytes) if link.channel_window_bytes > 0 else window


def pp_level(bdp_bytes: float, mean_size: float, max_pp: int = DEFAULT_MAX_PP) -> int:
    """Paper 000 eq. 4: level = ceil(BDP / FS) - 1, clamped to [1, max_pp].

    The floor of 1 is rule 1 of paper 000 section 3 ("always use pipelining").
    Empty files (mean 0) get max_pp: they are pure control round trips.
    """
    _check_max_pp(max_pp)
    if mean_size <= 0:
        return max_pp
    level = math.ceil(bdp_bytes / mean_size) - 1
    return int(min(max(level, 1), max_pp))


def pp_levels(bdp_bytes: float, mean_sizes: np.ndarray, max_pp: int = DEFAULT_MAX_PP) -> np.ndarray:
    """`pp_level` over an array of means (vectorised)."""
    _check_max_pp(max_pp)
    means = np.asarray(mean_sizes, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.ceil(bdp_bytes / means) - 1
    raw = np.where(means > 0, raw, max_pp)
    return np.clip(raw, 1, max_pp).astype(np.int64)


def pp_level_eq1(bdp_bytes: float, mean_size: float, max_pp: int = DEFAULT_MAX_PP) -> int:
    """Paper 001 eq. 1: BDP / mean + 1 (rounded up), same clamp; for comparison only."""
    _check_max_pp(max_pp)
    if mean_size <= 0:
        return max_pp
    return int(min(max(math.ceil(bdp_bytes / mean_size + 1), 1), max_pp))


def pp_param(level: int) -> int:
    """Files in flight (`TransferParams.pp`) for a paper-000 pipelining level."""
    if level < 0:
        raise ValueError(f"pipelining level must be >= 0 (got {level})")
    return int(level) + 1


def mathis_bps(rtt_s: float, loss_rate: float, mss: int = ETHERNET_MSS, c: float = MATHIS_C) -> float:
    """Mathis et al. bound on one TCP stream: MSS x C / (RTT x sqrt(p)) (paper 000 eq. 1,
    and Grossman, Gu et al., Computer Networks 2004: paper 004 in docs/papers.md).
    Infinite when there is no loss."""
    if rtt_s <= 0:
        raise ValueError(f"RTT must be > 0 (got {rtt_s!r})")
    if loss_rate <= 0:
        return math.inf
    return mss * 8 * c / (rtt_s * math.sqrt(loss_rate))


def stream_bps(link: LinkInfo) -> float:
    """What one TCP connection can carry: window-limited, loss-limited, link-limited."""
    window_bps = effective_window(link) * 8 / link.rtt_s
    return min(window_bps, mathis_bps(link.rtt_s, link.loss_rate), link.bandwidth_bps)


def streams_to_fill(link: LinkInfo, max_streams: int = DEFAULT_MAX_P) -> int:
    """Connections needed before the link, not the window, is the limit (paper 000
    section 2.2: parallelism pays when the buffer is small compared with the BDP)."""
    return int(min(max(math.ceil(link.bandwidth_bps / stream_bps(link)), 1), max_streams))


def streams_for_channel_window(link: LinkInfo, cap: int) -> int:
    """Where a concurrency or parallelism ramp starts: the connections a protocol window
    needs to cover the BDP, ceil(BDP / channel window), clamped to [1, cap]; 1 when the
    protocol has no window of its own.

    Paper 000 Alg. 2 ramps from one connection because a GridFTP stream's only window
    is TCP's, which autotuning grows to the BDP. An SSH channel's window stays at its
    size, so on a path whose BDP exceeds it every probe below this count is known in
    advance to be window-bound (wan50: 3.1 MB BDP over a 2 MiB window gives 2; the cc=1
    probe ran at 165 Mbit/s, benchmarks/results/tuning-diagnosis.md)."""
    if link.channel_window_bytes <= 0 or not link.measured:
        return 1  # no protocol window, or a placeholder BDP not worth acting on
    return int(min(max(math.ceil(link.bdp_bytes / link.channel_window_bytes), 1), max(cap, 1)))


def channel_rate_bps(mean_size: float, params_pp: int, p: int, link: LinkInfo, control_rtts: float = 1.0) -> float:
    """Expected rate of one channel (p connections, pp files in flight).

    Little's law over the pipeline: pp files in flight, each holding its slot for
    `control_rtts` RTTs of control exchange plus its data time, so the channel
    moves at most pp x FS per (control + data) time; and never faster than its
    p windows or the link. With pp = 1 this is the serial per-file cost; with
    pp x FS >= BDP it reaches the window limit, which is eq. 3/4 of paper 000.
    """
    data_bps = min(p * stream_bps(link), link.bandwidth_bps)
    if mean_size <= 0:
        return 0.0
    per_file_s = control_rtts * link.rtt_s + mean_size * 8 / data_bps
    return min(data_bps, params_pp * mean_size * 8 / per_file_s)


def _check_max_pp(max_pp: int) -> None:
    if isinstance(max_pp, bool) or not isinstance(max_pp, (int, np.integer)) or max_pp < 1:
        raise ValueError(f"max_pp must be a whole number >= 1 (got {max_pp!r})")
