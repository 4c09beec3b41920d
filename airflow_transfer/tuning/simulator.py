"""A deterministic, closed-form link simulator that implements the executor interface.

Every algorithm runs against it in unit tests, in milliseconds, with no
sockets. It is a model, not an emulator: it captures the effects the papers
build on, with knobs to turn each one up or down.

Per chunk of files with (pp, p, cc) on a link of bandwidth B and RTT R:

* Connections. cc channels, each of p TCP connections; a file is split into
  p ranges only when it is at least p x range_min bytes (as the engine does),
  otherwise it uses one connection. One connection carries at most
  window / R (bytes in flight per RTT) and at most the Mathis bound when the
  link has loss (paper 000 eq. 1).
* Pipelining. A file holds one of the pp slots of its channel for
  `control_rtts` x R of control exchange plus its data time; so a channel
  moves at most pp files per (control + data) time (Little's law). With
  pp = 1 every file pays its control round trips in full; with pp x FS >= BDP
  the channel reaches its window limit - paper 000 eq. 3 and 4.
* Files are dealt round robin over the cc channels; the chunk takes as long
  as its slowest channel.
* Link share. All connections share B. Offering more window than the path
  holds (BDP + bottleneck queue) costs losses: efficiency falls by
  `overload_penalty` per multiple of overfill, so too much p or cc hurts
  (paper 000 section 2.3).
* CPU ceiling. `cpu_bps` caps the aggregate (SSH crypto on our hosts), each
  connection costing `conn_cpu` of it; each file range costs `op_cost_s` of
  CPU (open/close/rename), which is why parallelism on small files hurts.
* Start-up. Every chunk starts in slow start from `initial_window`: about
  log2(window / IW) - 1 RTTs lost; connections beyond those already pooled
  cost `setup_rtts` x R to open (data-channel caching: the engine's connection pool, docs/transfers.md).
* Rate changes. `rate_changes=[(t, bandwidth_bps), ...]` switches the
  bandwidth at simulated time t, also in the middle of a chunk.

`run_chunk` moves the clock (`now`); `open_session` gives a Multi-Chunk
session on the same clock whose chunks share the link. Every call is logged
in `calls` for tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from .. import manifest_schema as ms
from ..engine.params import TransferParams
from ..engine.result import ChunkResult, FileOutcome
from .chunks import ChunkSpec
from .executor import ChunkEvent
from .models import ETHERNET_MSS, LinkInfo, effective_window, mathis_bps

RANGE_MIN = 4 * 1024 * 1024  # mirrors engine/resume.py: smallest range worth its own connection


@dataclass
class SimCall:
    chunk_id: str
    start: int
    stop: int
    params: TransferParams
    at: float
    seconds: float
    bytes: int

    @property
    def throughput_mbit(self) -> float:
        return self.bytes * 8 / self.seconds / 1e6 if self.seconds > 0 else 0.0


class LinkSimulator:
    def __init__(
        self,
        link: LinkInfo,
        *,
        window_bytes: int | None = None,
        control_rtts: float = 1.0,
        initial_window: int = 10 * ETHERNET_MSS,
        queue_bytes: int | None = None,
        overload_penalty: float = 0.1,
        cpu_bps: float = math.inf,
        conn_cpu: float = 0.0,
        op_cost_s: float = 0.0,
        setup_rtts: float = 3.0,
        range_min: int = RANGE_MIN,
        rate_changes: list[tuple[float, float]] | None = None,
        progress_interval: float = 1.0,
        record_outcomes: bool = False,
    ) -> None:
        if not isinstance(link, LinkInfo):
            raise ValueError(f"LinkSimulator needs a LinkInfo (got {type(link).__name__})")
        self.link = link
        self.window = window_bytes or effective_window(link)
        self.control_rtts = control_rtts
        self.initial_window = initial_window
        self.queue = link.bdp_bytes if queue_bytes is None else queue_bytes
        self.overload_penalty = overload_penalty
        self.cpu_bps, self.conn_cpu, self.op_cost_s = cpu_bps, conn_cpu, op_cost_s
        self.setup_rtts, self.range_min = setup_rtts, range_min
        changes = sorted(rate_changes or [])
        for t, bw in changes:
            if t < 0 or bw <= 0:
                raise ValueError(f"rate change ({t}, {bw}) needs time >= 0 and bandwidth > 0 bit/s")
        self.rate_changes = changes
        if progress_interval <= 0:
            raise ValueError(f"progress_interval must be > 0 s (got {progress_interval})")
        self.progress_interval = progress_interval
        self.record_outcomes = record_outcomes
        self.now = 0.0
        self.pool = 0  # connections opened so far (kept for later chunks)
        self.warmed: list[tuple[float, int]] = []  # (time, connections) asked for ahead
        self.calls: list[SimCall] = []

    # -- the model --------------------------------------------------------------
    def bandwidth_at(self, t: float) -> float:
        bw = self.link.bandwidth_bps
        for when, value in self.rate_changes:
            if when <= t:
                bw = value
        return bw

    def _next_change(self, t: float) -> float:
        return next((when for when, _ in self.rate_changes if when > t), math.inf)

    def _capacity_bps(self, bandwidth: float, connections: int) -> float:
        """What `connections` together get from the link and the CPU."""
        path_bytes = bandwidth / 8 * self.link.rtt_s + self.queue
        offered = connections * self.window
        overfill = max(0.0, offered - path_bytes) / path_bytes
        net = bandwidth / (1 + self.overload_penalty * overfill)
        cpu = self.cpu_bps / (1 + self.conn_cpu * connections)
        return min(net, cpu)

    def chunk_timing(
        self,
        sizes: np.ndarray,
        params: TransferParams,
        bandwidth: float,
        total_connections: int | None = None,
        new_connections: int = 0,
        cap_bps: float | None = None,
    ) -> tuple[float, float]:
        """(start-up seconds, steady seconds) for these files with these parameters.

        `total_connections` is the number sharing the link (this chunk's by
        default): it sets the overload loss. `cap_bps` is the capacity this chunk
        may use (default: all of it).
        """
        n = int(sizes.size)
        if n == 0:
            return 0.0, 0.0
        rtt = self.link.rtt_s
        cc = min(params.cc, n)
        p_file = np.where(sizes >= params.p * self.range_min, params.p, 1)
        mine = cc * params.p
        everyone = max(total_connections or mine, mine)
        cap = self._capacity_bps(bandwidth, everyone) if cap_bps is None else cap_bps
        conn_bps = min(self.window * 8 / rtt, mathis_bps(rtt, self.link.loss_rate))
        rate = np.minimum(p_file * conn_bps, cap / cc)  # data rate of each file on its channel
        data_s = sizes * 8 / rate
        latency_s = self.control_rtts * rtt + data_s
        channel = np.arange(n) % cc
        data_per_ch = np.bincount(channel, weights=data_s, minlength=cc)
        lat_per_ch = np.bincount(channel, weights=latency_s, minlength=cc)
        files_per_ch = np.bincount(channel, minlength=cc)
        depth = np.minimum(params.pp, np.maximum(files_per_ch, 1))
        steady = float(np.max(np.maximum(data_per_ch, lat_per_ch / depth)))
        steady = max(steady, float(sizes.sum()) * 8 / cap, float(p_file.sum()) * self.op_cost_s)
        # Slow start: from IW to the window this connection will use, doubling per RTT.
        target = max(min(conn_bps, cap / mine) * rtt / 8, self.initial_window)
        per_conn = max(float(sizes.sum()) / mine, self.initial_window)
        ss_rtts = max(0.0, min(math.log2(target / self.initial_window), math.log2(per_conn / self.initial_window)) - 1)
        startup = ss_rtts * rtt + (self.setup_rtts * rtt if new_connections > 0 else 0.0)
        return startup, steady

    def _advance(self, t0: float, startup: float, steady_at) -> float:
        """Seconds to finish from t0: start-up, then the steady part, re-rated at each bandwidth change.

        `steady_at(bandwidth)` gives the steady seconds of the whole chunk at that bandwidth.
        """
        t = t0 + startup
        left = 1.0  # fraction of the steady part still to go
        while True:
            steady = steady_at(self.bandwidth_at(t))
            change = self._next_change(t)
            if t + left * steady <= change:
                return t + left * steady - t0
            left -= (change - t) / steady
            t = change

    # -- ChunkExecutor ------------------------------------------------------------
    def run_chunk(
        self, manifest_sorted: pa.Table, start: int, stop: int, params: TransferParams, chunk_id: str
    ) -> ChunkResult:
        sizes = _slice_sizes(manifest_sorted, start, stop, chunk_id)
        connections = min(params.cc, sizes.size) * params.p
        new = max(0, connections - self.pool)
        self.pool = max(self.pool, connections)
        startup, _ = self.chunk_timing(sizes, params, self.bandwidth_at(self.now), new_connections=new)
        seconds = self._advance(self.now, startup, lambda bw: self.chunk_timing(sizes, params, bw)[1])
        total = int(sizes.sum())
        self.calls.append(SimCall(chunk_id, start, stop, params, self.now, seconds, total))
        self.now += seconds
        return self._result(manifest_sorted, start, stop, sizes, params, chunk_id, seconds)

    def _result(
        self,
        manifest: pa.Table,
        start: int,
        stop: int,
        sizes: np.ndarray,
        params: TransferParams,
        chunk_id: str,
        seconds: float,
    ) -> ChunkResult:
        total = int(sizes.sum())
        outcomes: list[FileOutcome] = []
        if self.record_outcomes:
            paths = manifest.column(ms.PATH).slice(start, stop - start).to_pylist()
            share = seconds / max(sizes.size, 1)
            outcomes = [
                FileOutcome(path=p, size=int(s), bytes_moved=int(s), seconds=share, ok=True)
                for p, s in zip(paths, sizes.tolist())
            ]
        return ChunkResult(
            chunk_id=chunk_id,
            params=params,
            files=int(sizes.size),
            bytes=total,
            bytes_moved=total,
            seconds=seconds,
            outcomes=outcomes,
        )

    # -- SessionExecutor ------------------------------------------------------------
    def open_session(self, manifest_sorted: pa.Table) -> SimSession:
        return SimSession(self, manifest_sorted)

    def link_rtt(self) -> tuple[float, float, str]:
        """What a first connection would measure (tuning/first_contact.py)."""
        return self.link.rtt_s, self.link.rtt_s, "the simulated link"

    def warm(self, connections: int) -> None:
        """Connections opened ahead (tuning/first_contact.py): pooled from now on, so the
        channels that take them pay no set-up."""
        self.warmed.append((self.now, connections))
        self.pool += connections


@dataclass
class _Running:
    spec: ChunkSpec
    sizes: np.ndarray
    channels: int
    started: float
    startup_left: float
    done_frac: float = 0.0  # share of the steady part done (zero-byte files still take time)
    speed: float = 0.0  # steady fraction per second

    @property
    def bytes_done(self) -> int:
        return int(self.done_frac * self.spec.bytes)

    max_channels: int = 0
    next_tick: float = 0.0


@dataclass
class SimSession:
    sim: LinkSimulator
    manifest: pa.Table
    running: dict[str, _Running] = field(default_factory=dict)
    queue: list[ChunkEvent] = field(default_factory=list)
    opened_at: float = 0.0

    def __post_init__(self) -> None:
        self.opened_at = self.sim.now

    def start(self, spec: ChunkSpec, channels: int) -> None:
        if spec.id in self.running:
            raise ValueError(f"chunk {spec.id} is already running in this session")
        _check_channels(spec.id, channels)
        sizes = _slice_sizes(self.manifest, spec.start, spec.stop, spec.id)
        params = replace(spec.params, cc=channels)
        connections = min(channels, sizes.size) * params.p
        in_use = sum(min(r.channels, r.sizes.size) * r.spec.params.p for r in self.running.values())
        new = max(0, in_use + connections - self.sim.pool)
        self.sim.pool = max(self.sim.pool, in_use + connections)
        startup, _ = self.sim.chunk_timing(sizes, params, self.sim.bandwidth_at(self.sim.now), new_connections=new)
        self.running[spec.id] = _Running(
            spec,
            sizes,
            channels,
            self.sim.now,
            startup,
            max_channels=channels,
            next_tick=self.sim.now + self.sim.progress_interval,
        )
        self._rerate()

    def set_channels(self, chunk_id: str, channels: int) -> None:
        if chunk_id not in self.running:
            raise ValueError(f"chunk {chunk_id} is not running in this session (finished or never started)")
        _check_channels(chunk_id, channels)
        run = self.running[chunk_id]
        run.channels = channels
        run.max_channels = max(run.max_channels, channels)
        self._rerate()

    def wait_any(self) -> ChunkEvent:
        while not self.queue:
            if not self.running:
                raise RuntimeError("wait_any() with no chunk running in this session; start() one first")
            self._step()
        return self.queue.pop(0)

    def close(self) -> None:
        self.running.clear()

    # -- internals ------------------------------------------------------------------
    def _connections(self) -> int:
        return sum(min(r.channels, r.sizes.size) * r.spec.params.p for r in self.running.values())

    def _rerate(self) -> None:
        """Share the link max-min fairly per connection: a chunk that cannot use
        its share (small files, few channels) leaves the rest to the others, as
        TCP flows on a shared bottleneck do."""
        bw = self.sim.bandwidth_at(self.sim.now)
        everyone = self._connections()
        capacity = self.sim._capacity_bps(bw, everyone)
        demand, weight = {}, {}
        for cid, r in self.running.items():
            params = replace(r.spec.params, cc=r.channels)
            _, steady = self.sim.chunk_timing(r.sizes, params, bw, total_connections=everyone, cap_bps=capacity)
            demand[cid] = r.spec.bytes * 8 / steady if steady > 0 else math.inf
            r.speed = 1 / steady if steady > 0 else math.inf
            weight[cid] = min(r.channels, r.sizes.size) * r.spec.params.p
        alloc, left, open_ = {}, capacity, set(self.running)
        while open_:
            per_conn = left / sum(weight[c] for c in open_)
            capped = {c for c in open_ if demand[c] <= per_conn * weight[c]}
            if not capped:
                alloc.update({c: per_conn * weight[c] for c in open_})
                break
            for c in capped:
                alloc[c] = demand[c]
                left -= demand[c]
            open_ -= capped
        for cid, r in self.running.items():
            if alloc[cid] >= demand[cid]:
                continue  # not limited by its share: keeps its own speed
            params = replace(r.spec.params, cc=r.channels)
            _, steady = self.sim.chunk_timing(r.sizes, params, bw, total_connections=everyone, cap_bps=alloc[cid])
            r.speed = 1 / steady if steady > 0 else math.inf

    def _finish_time(self, r: _Running) -> float:
        return self.sim.now + r.startup_left + (1 - r.done_frac) / r.speed

    def _step(self) -> None:
        now = self.sim.now
        t_done = min(self._finish_time(r) for r in self.running.values())
        t_tick = min(r.next_tick for r in self.running.values())
        t_change = self.sim._next_change(now)
        t = min(t_done, t_tick, t_change)
        for r in self.running.values():
            dt = t - now
            warm = min(dt, r.startup_left)
            r.startup_left -= warm
            r.done_frac = min(1.0, r.done_frac + (dt - warm) * r.speed)
        self.sim.now = t
        finished = [cid for cid, r in self.running.items() if r.done_frac >= 1 - 1e-9 and r.startup_left <= 0]
        for cid in finished:
            r = self.running.pop(cid)
            seconds = t - r.started
            params = replace(r.spec.params, cc=r.channels)
            self.sim.calls.append(SimCall(cid, r.spec.start, r.spec.stop, params, r.started, seconds, r.spec.bytes))
            result = self.sim._result(self.manifest, r.spec.start, r.spec.stop, r.sizes, params, cid, seconds)
            self.queue.append(ChunkEvent(cid, t - self.opened_at, r.spec.bytes, done=True, result=result))
        for cid, r in self.running.items():
            if r.next_tick <= t:
                r.next_tick = t + self.sim.progress_interval
                self.queue.append(ChunkEvent(cid, t - self.opened_at, r.bytes_done))
        if finished or t == t_change:
            self._rerate()


def _check_channels(chunk_id: str, channels: int) -> None:
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"chunk {chunk_id}: channels must be a whole number >= 1 (got {channels!r})")


def _slice_sizes(manifest: pa.Table, start: int, stop: int, chunk_id: str) -> np.ndarray:
    n = manifest.num_rows
    if not (0 <= start < stop <= n):
        raise ValueError(f"chunk {chunk_id}: rows [{start}, {stop}) are not a non-empty range of the {n}-row manifest")
    return manifest.column(ms.SIZE).slice(start, stop - start).to_numpy().astype(np.int64, copy=False)
