"""Where a transfer's starting point comes from: given, the tuning library, or measured now.

Paper 003 (Kola, Kosar, Livny, Run-time Adaptation of Grid Data Placement Jobs,
2003; docs/papers.md): parameters are measured once (and re-measured periodically by the
light profiler), kept in the tuning library, and every transfer starts from
them instead of measuring first. Order of precedence:

1. "given": --rtt-ms/--bandwidth-mbit or --bdp (operator: rtt_ms/bandwidth_mbit)
   win over everything;
2. "library (measured <ISO time>)": the newest tuned row of source host ->
   destination host for the protocol;
3. "measured now": nothing in the library and a measurement was asked for
   (CLI --measure-link) or decided by `should_measure` (an adaptive algorithm
   about to move at least AUTO_MEASURE_BYTES blind): a light network profile
   + the tuner run now, and the result goes into the library for the next
   transfer, so each host pair pays for it once;
4. otherwise unknown: the algorithms adapt by measurement as they go, and `auto`'s first
   contact (first_contact.py) writes what it measured into the library
   (`remember_first_contact`), so the next copy over the link starts where it ended.

From a library row the algorithms get a LinkInfo with the RTT, bandwidth
(hence the BDP) and TCP buffer (= the per-stream window, so the number of
streams that fill the BDP is the tuner's); a chunk whose parameters leave the
block size or TCP buffer at 0 (backend default) gets the tuned ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..engine.params import TransferParams
from ..errors import TransferError
from ..profiling.hosts import from_endpoint, key_of_endpoint
from ..profiling.library import profile_link, tune_link
from ..profiling.remote import HostRunner
from .models import LinkInfo

LIBRARY = "library"
FIRST_CONTACT = "first contact"  # a tuned row's params["method"] when a copy learned it
LEARNERS = ("auto", "first-contact")  # the algorithms that start from a first contact's row
MEASURED_NOW = "measured now"
GIVEN = "given"
# A light profile costs a few seconds (sink start over SSH, RTT probes, a 3 s rate probe).
# Below 1 GiB that is a large share of the transfer; above it, the models' choice of p for
# large files (one connection is window-bound on a long link) wins it back many times over.
AUTO_MEASURE_BYTES = 1 << 30


def should_measure(requested: bool | None, algorithm: str, total_bytes: int) -> tuple[bool, str]:
    """Whether to measure the link now when the library has nothing for it, and why."""
    if requested is not None:
        return requested, "asked for (--measure-link)" if requested else "turned off (--no-measure-link)"
    if algorithm == "fixed":
        return False, "fixed parameters need no link figures"
    if algorithm == "auto":
        return False, "auto learns the link from the copy itself (first contact) and keeps what it learned"
    if total_bytes < AUTO_MEASURE_BYTES:
        return False, f"under {AUTO_MEASURE_BYTES >> 20} MiB: adapting by measurement costs less than a probe"
    return True, (
        f"{total_bytes / (1 << 30):.1f} GiB to move with no link figures: measuring once, kept in the tuning library"
    )


@dataclass
class StartingPoint:
    link: LinkInfo | None  # None: unknown
    source: str  # what the summary's tuning.source says
    tuned: dict[str, Any] | None = None  # the library row used
    notes: list[str] = field(default_factory=list)

    def params(self, params: TransferParams) -> TransferParams:
        """The tuned block size and TCP buffer where ``params`` leaves them to the backend (0)."""
        if not self.tuned:
            return params
        return dataclasses.replace(
            params,
            block_size=params.block_size or int(self.tuned.get("block_size") or 0),
            tcp_buffer=params.tcp_buffer or int(self.tuned.get("tcp_buffer") or 0),
        )

    def summary(self) -> dict[str, Any]:
        """The summary's `tuning` object (docs/summary.md) plus what the library contributed."""
        link = self.link
        out: dict[str, Any] = {
            "source": self.source,
            "bdp_bytes": int(link.bdp_bytes) if link is not None and link.measured else 0,
            "rtt_ms": round(link.rtt_s * 1000, 3) if link is not None and link.measured else 0.0,
            "bandwidth_mbit": round(link.bandwidth_bps / 1e6, 2) if link is not None and link.measured else 0.0,
        }
        if self.tuned:
            out.update({k: self.tuned[k] for k in ("streams", "tcp_buffer", "block_size", "p", "cc", "pp_level")})
            out.update(
                library_id=self.tuned["id"],
                measured_at=self.tuned["measured_at"],
                link=f"{self.tuned['source_host']} -> {self.tuned['dest_host']} ({self.tuned['protocol']})",
            )
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def link_from_tuned(row: dict[str, Any], source: str = LIBRARY) -> LinkInfo | None:
    """LinkInfo from a tuned-parameters row; None when the row has no BDP (RTT or bandwidth unmeasured)."""
    rtt, mbit = row.get("rtt_ms"), row.get("bandwidth_mbit")
    if not rtt or not mbit or rtt <= 0 or mbit <= 0:
        return None
    learned = (row.get("params") or {}).get("method") == FIRST_CONTACT
    return LinkInfo(
        rtt_s=rtt / 1000.0,
        bandwidth_bps=mbit * 1e6,
        tcp_buffer_bytes=int(row.get("tcp_buffer") or 0),
        max_window_bytes=int(row.get("tcp_buffer") or 0),
        source=source,
        learned_cc=int(row.get("cc") or 0) if learned else 0,
    )


def remember_first_contact(store, src, dst, learned: dict[str, Any]) -> str | None:
    """Keep what a first contact measured as the newest tuned row of src -> dst; returns the
    summary's note, or None when there is nothing worth keeping (no RTT, no rate, a local copy)."""
    source_key, dest_key = key_of_endpoint(src), key_of_endpoint(dst)
    rtt_ms, rate = learned.get("rtt_ms"), learned.get("rate_mbit")
    if store is None or source_key == dest_key or not rtt_ms or not rate:
        return None
    cc = int(learned["cc"])
    row = {
        "source": source_key,
        "destination": dest_key,
        "protocol": protocol_of(src, dst),
        "method": FIRST_CONTACT,
        "streams": cc,
        "tcp_buffer": 0,
        "block_size": 0,
        "bdp_bytes": int(rate * 1e6 / 8 * rtt_ms / 1000),
        "pp_level": int(learned.get("pp_level") or 0),
        "p": 1,
        "cc": cc,
        "rtt_ms": float(rtt_ms),
        "bandwidth_mbit": float(rate),
        "reasons": [
            f"RTT {rtt_ms} ms from {learned.get('rtt_from', 'the first connection')}",
            f"best rate {rate} Mbit/s reached by the copy itself (a lower bound on the link's)",
            f"concurrency settled at {cc}",
        ],
        "steps": learned.get("steps", []),
    }
    row_id = store.save_tuned(row, measured_at=datetime.now(UTC))
    return kept_note(row_id, rtt_ms, rate, cc)


def kept_note(row_id: int, rtt_ms: float, rate_mbit: float, cc: int) -> str:
    """The summary's note for a first contact's row (benchmarks/repeat_copies.py reads its cc)."""
    return f"kept in the tuning library (row {row_id}): RTT {rtt_ms} ms, {rate_mbit} Mbit/s, cc {cc}"


def protocol_of(src, dst) -> str:
    schemes = {src.scheme, dst.scheme} - {"file"}
    return next(iter(schemes)) if len(schemes) == 1 else "sftp"


def choose(
    src,
    dst,
    given: LinkInfo | None,
    store,
    *,
    measure: bool | None = False,
    algorithm: str = "fixed",
    total_bytes: int = 0,
    progress: Callable[[str], None] | None = None,
) -> StartingPoint:
    """The starting point of a transfer from ``src`` to ``dst`` (protocols.endpoint.Endpoint)."""
    if given is not None:
        return StartingPoint(given, GIVEN if given.measured else "unknown (adapting by measurement)")
    unknown = StartingPoint(None, GIVEN if algorithm == "fixed" else "unknown (adapting by measurement)")
    source_key, dest_key = key_of_endpoint(src), key_of_endpoint(dst)
    if store is None or source_key == dest_key:
        return unknown  # a local copy has no link to tune
    protocol = protocol_of(src, dst)
    row = store.tuned_for(source_key, dest_key, protocol)
    if row is not None and (row.get("params") or {}).get("method") == FIRST_CONTACT and algorithm not in LEARNERS:
        # A first contact's rate is what that copy reached, a lower bound: models built on it as
        # if it were the link's bandwidth would under-provision. Only a first contact starts from it.
        unknown.notes.append(
            f"library row {row['id']} for {source_key} -> {dest_key} was learned by a first contact, "
            f"not measured: not used by {algorithm}"
        )
        row = None
    if row is not None:
        link = link_from_tuned(row)
        if link is not None:
            return StartingPoint(link, f"{LIBRARY} (measured {row['measured_at']})", row)
        unknown.notes.append(f"library row {row['id']} for {source_key} -> {dest_key} has no BDP: not used")
    wanted, why = should_measure(measure, algorithm, total_bytes)
    if wanted:
        if progress is not None:
            progress(f"no tuning data for {source_key} -> {dest_key}: {why}")
        return _measure_now(store, src, dst, protocol, unknown)
    if algorithm != "fixed":
        unknown.notes.append(f"link not measured: {why}")
    return unknown


def _measure_now(store, src, dst, protocol: str, fallback: StartingPoint) -> StartingPoint:
    with HostRunner(from_endpoint(src)) as source, HostRunner(from_endpoint(dst)) as dest:
        try:
            profile_link(store, source, dest, light=True)
            rows = tune_link(store, source.host.key, dest.host.key, protocols=(protocol,))
        except TransferError as exc:
            fallback.notes.append(f"measuring the link failed: {exc.message}")
            return fallback
    row = store.tuned_for(source.host.key, dest.host.key, protocol)
    link = link_from_tuned(row, source=MEASURED_NOW) if row else None
    if link is None:
        fallback.notes.append(
            f"the light profile of the link measured no BDP ({rows[0]['reasons'][2] if rows else ''})"
        )
        return fallback
    return StartingPoint(link, MEASURED_NOW, row)
