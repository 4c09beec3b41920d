"""Effect 1: pipelining's gain on small files grows with the round-trip time (paper 000, Fig. 2-4).

Also the helpers effects 2 and 3 share: one fixed-knob SFTP copy per case, the rate of its
transfer phase, medians per case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.papers.common import (
    IN_PART,
    NOT_MEASURED,
    NOT_REPRODUCED,
    REPRODUCED,
    Case,
    Context,
    Record,
    Section,
    md_table,
    median,
    pyplot,
)
from benchmarks.wan.link import PROFILES

NUMBER = 1
TITLE = "Pipelining pays more the longer the round trip"
PAPER = (
    "Yildirim, Arslan, Kim, Kosar, *Application-Level Optimization of Big Data Transfers Through "
    "Pipelining, Parallelism and Concurrency* (IEEE TCC, 2016)"
)
CLAIM = (
    "With many small files, keeping several file operations outstanding on one connection lifts the "
    "throughput roughly in proportion to the pipelining level until the bytes in flight reach the "
    "bandwidth-delay product, so on a 100 ms path the gain is large (Fig. 2 and 3, 1 Gbit/s, 128 files), "
    "while on a 2 ms path a level of 1 or 2 already reaches the top (Fig. 4). Scaled here: 128 files of "
    "64 KiB (the paper swept several file sizes) over one SFTP connection, on lan (1 ms), "
    "wan50 and wan100."
)
REPS = 2

KIB, MIB = 1024, 1024 * 1024
PPS = (1, 2, 4, 8, 16, 32)
LINKS = ("lan", "wan50", "wan100")
FILES, SIZE = 128, 64 * KIB
QUICK_PPS, QUICK_FILES = (1, 8), 16
ORDER_TOLERANCE = 0.9  # a longer RTT's gain may fall 10 % short of the shorter one's and still count as not smaller
LARGE_GAIN = 4.0  # "large" on both WAN links: the best pp at least 4 x pp 1


# -- shared by effects 1-3 ----------------------------------------------------------------------
def fixed_flags(pp: int, p: int = 1, cc: int = 1) -> list[str]:
    """The CLI knobs as given, over SFTP file by file (bundles would bypass pp) and without
    checksums, so only the knobs differ between runs, as in the paper's plain transfers."""
    return [
        "--algorithm",
        "fixed",
        "--pp",
        str(pp),
        "-p",
        str(p),
        "-c",
        str(cc),
        "--no-bundle",
        "--verify",
        "none",
    ]


def transfer_mbit(summary: dict[str, Any]) -> float | None:
    """Payload Mbit/s of the transfer phase (the chunks): connection set-up, listing and the
    interpreter's start are the same for every knob and would only dilute the differences."""
    chunks = summary.get("chunks") or []
    seconds = sum(c.get("seconds") or 0.0 for c in chunks)
    moved = sum(c.get("bytes") or 0 for c in chunks)
    return round(moved * 8 / seconds / 1e6, 2) if seconds > 0 else None


def copy_fixed(ctx: Context, case: Case, name: str, files: int, size: int, timeout: float = 300.0) -> dict[str, Any]:
    """One upload of `files` x `size` bytes with the case's pp / p / cc; the copy's record plus
    `chunk_mbit` (transfer_mbit) and `chunk_s`."""
    prm = case.params
    ds = ctx.dataset(name, files, size)
    bed = ctx.bed(case.profile or "wan50")
    out = ctx.copy(bed, ds, fixed_flags(prm["pp"], prm.get("p", 1), prm.get("cc", 1)), timeout=timeout)
    out["chunk_mbit"] = transfer_mbit(out["summary"])
    out["chunk_s"] = round(sum(c.get("seconds") or 0.0 for c in out["summary"].get("chunks") or []), 3)
    return out


def case_medians(records: list[Record], key: str = "chunk_mbit") -> dict[str, float]:
    """Median of `key` per case over its successful repetitions (cases with none are left out)."""
    vals: dict[str, list[float]] = {}
    for r in records:
        v = r.result.get(key)
        if r.result.get("ok") and v is not None:
            vals.setdefault(r.case, []).append(float(v))
    return {case: m for case, vs in vals.items() if (m := median(vs)) is not None}


def failures(records: list[Record]) -> str:
    """A sentence naming failed runs, or ""."""
    bad = sorted({f"{r.case} (rep {r.rep})" for r in records if not r.result.get("ok")})
    return f" Failed runs, left out of the medians: {', '.join(bad)}." if bad else ""


# -- this effect ------------------------------------------------------------------------------
def case_id(link: str, pp: int) -> str:
    return f"{link}-pp{pp}"


def cases(quick: bool) -> list[Case]:
    pps, files = (QUICK_PPS, QUICK_FILES) if quick else (PPS, FILES)
    return [
        Case("e1_pp_rtt", case_id(link, pp), link, {"pp": pp, "p": 1, "cc": 1, "files": files, "size": SIZE})
        for link in LINKS
        for pp in pps
    ]


def measure(case: Case, ctx: Context) -> dict[str, Any]:
    prm = case.params
    return copy_fixed(ctx, case, f"papers-{prm['size'] // KIB}k-n{prm['files']}", prm["files"], prm["size"])


def gains(rates: dict[str, float]) -> dict[str, tuple[float, int] | None]:
    """Per link: (best rate / pp 1 rate, best pp), None without pp 1 and one other pp."""
    out: dict[str, tuple[float, int] | None] = {}
    for link in LINKS:
        sweep = {pp: rates[case_id(link, pp)] for pp in PPS if case_id(link, pp) in rates}
        if 1 not in sweep or len(sweep) < 2 or sweep[1] <= 0:
            out[link] = None
            continue
        best = max(sweep, key=lambda pp: sweep[pp])
        out[link] = (sweep[best] / sweep[1], best)
    return out


def judge(g: dict[str, float | None]) -> tuple[str, str]:
    """Verdict and reason from the gain per link (None = not measured)."""
    have = {link: v for link in LINKS if (v := g.get(link)) is not None}
    if len(have) < 2:
        return NOT_MEASURED, f"Gains measured on {', '.join(have) or 'no link'} only; at least two links are needed."
    vals = list(have.values())
    grows = all(b >= ORDER_TOLERANCE * a for a, b in zip(vals, vals[1:])) and vals[-1] >= vals[0] / ORDER_TOLERANCE
    wan = [v for link, v in have.items() if link != "lan"]
    large = bool(wan) and min(wan) >= LARGE_GAIN
    shown = ", ".join(f"{link} {v:.1f}x" for link, v in have.items())
    rule = (
        f"Thresholds: the gain (best pp / pp 1) grows with the RTT when no longer link falls under "
        f"{ORDER_TOLERANCE:.0%} of the next shorter one's and the longest link's beats the shortest's by "
        f"{1 / ORDER_TOLERANCE - 1:.0%} or more; it is large when at least {LARGE_GAIN:g}x on every WAN link."
    )
    missing = [link for link in LINKS if link not in have]
    tail = f" Not measured yet: {', '.join(missing)}." if missing else ""
    if grows and large:
        return REPRODUCED, f"Gains {shown}: they grow with the RTT and are large on the WAN links. {rule}{tail}"
    if grows or large:
        what = (
            "grow with the RTT but are not large on the WAN links"
            if grows
            else "are large but do not grow with the RTT"
        )
        return IN_PART, f"Gains {shown}: they {what}. {rule}{tail}"
    return NOT_REPRODUCED, f"Gains {shown}: they neither grow with the RTT nor are large on the WAN links. {rule}{tail}"


def render(records: list[Record], charts: Path) -> Section:
    if not records:
        return Section("", NOT_MEASURED, "No run of this effect yet.")
    rates = case_medians(records)
    per_file = case_medians(records, "chunk_s")
    files = records[0].params.get("files", FILES)
    pps = sorted({int(r.params["pp"]) for r in records})
    g = gains(rates)
    rows = []
    for link in LINKS:
        rtt = PROFILES[link][0]
        pp1_s = per_file.get(case_id(link, 1))
        ms_per_file = pp1_s * 1000 / files if pp1_s is not None else None
        gl = g[link]
        rows.append(
            [
                f"{link} ({rtt:g} ms)",
                *[rates.get(case_id(link, pp)) for pp in pps],
                gl[1] if gl else None,
                f"{gl[0]:.1f}x" if gl else None,
                ms_per_file,
                ms_per_file / rtt if ms_per_file is not None else None,
            ]
        )
    table = md_table(
        ["link", *[f"pp {pp}" for pp in pps], "best pp", "gain", "ms per file at pp 1", "RTTs per file at pp 1"], rows
    )
    verdict, why = judge({link: (v[0] if v else None) for link, v in g.items()})
    missing = [c.id for c in cases(files == QUICK_FILES) if c.id not in rates]
    chart = _chart(rates, pps, f"{files} x {SIZE // KIB} KiB over SFTP, one connection", charts)
    notes = (
        f"Mbit/s of payload in the transfer phase (the chunk's own seconds in the JSON summary), median of up to "
        f"{max(r.rep for r in records)} repetition(s); {files} files of {SIZE // KIB} KiB uploaded over one SSH "
        f"connection (`{' '.join(fixed_flags(8))}` with pp swept; `--verify none` because the paper timed plain "
        "transfers and a checksum would add per-file work of its own). The last two columns say what pipelining "
        "removes: at pp 1 every file waits for the round trips of its OPEN, its last WRITE and its CLOSE. "
        "Paper 000 counts the pipelining level as commands beyond the first (level L keeps L + 1 files "
        "outstanding); `--pp` counts files in flight, so `--pp N` is the paper's level N - 1."
        + (f" Cases not measured yet: {', '.join(missing)}." if missing else "")
        + failures(records)
    )
    return Section(table, verdict, why, [chart] if chart else [], notes)


def _chart(rates: dict[str, float], pps: list[int], title: str, charts: Path) -> str | None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for link in LINKS:
        pts = [(pp, rates[case_id(link, pp)]) for pp in pps if case_id(link, pp) in rates]
        if pts:
            ax.plot([p for p, _ in pts], [r for _, r in pts], marker="o", label=f"{link} ({PROFILES[link][0]:g} ms)")
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(pps, [str(pp) for pp in pps])
    ax.set_xlabel("pp (files in flight on one connection)")
    ax.set_ylabel("Mbit/s (transfer phase, log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    name = "e1-pp-vs-rtt.png"
    fig.tight_layout()
    fig.savefig(charts / name, dpi=110)
    plt.close(fig)
    return name
