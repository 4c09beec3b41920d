"""Effect 2: the best pipelining found by a sweep against paper 000's eq. 4, pp_opt = ceil(BDP / FS) - 1."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from airflow_transfer.tuning.models import OPENSSH_CHANNEL_WINDOW, SFTP_FILE_RTTS, bdp, pp_level, pp_param
from benchmarks.papers import e1_pp_rtt
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
    pyplot,
)
from benchmarks.papers.e1_pp_rtt import case_medians, copy_fixed, failures, fixed_flags
from benchmarks.wan.link import PROFILES

NUMBER = 2
TITLE = "The best pipelining level against eq. 4"
PAPER = e1_pp_rtt.PAPER
CLAIM = (
    "Section 2.1.1 and eq. 3: with pipelining level L a connection carries FS x (L + 1) bytes per round trip "
    "until that reaches the bandwidth-delay product, so the best level is about ceil(BDP / FS) - 1 (eq. 4), "
    "read off the bytes-per-RTT curves of Fig. 2 (1 Gbit/s, 100 ms, 128 files per size). Here: a pp sweep for "
    "three file sizes on wan50 over one SFTP connection, the best pp set beside eq. 4. Scaled: 256 x 64 KiB, "
    "128 x 256 KiB and 64 x 1 MiB, so each set is 16-64 MiB and several pipelines deep."
)
REPS = 2

KIB, MIB = 1024, 1024 * 1024
PROFILE = "wan50"
# size -> (files, pp sweep). Each sweep brackets eq. 4's predictions (link and window BDP, in
# files in flight: 48 / 32 for 64 KiB, 12 / 8 for 256 KiB, 3 / 2 for 1 MiB) from both sides.
SETS: dict[int, tuple[int, tuple[int, ...]]] = {
    64 * KIB: (256, (4, 8, 16, 32, 64)),
    256 * KIB: (128, (2, 4, 8, 16, 32)),
    1 * MIB: (64, (1, 2, 4, 8, 16)),
}
QUICK_SETS: dict[int, tuple[int, tuple[int, ...]]] = {
    64 * KIB: (32, (8, 32)),
    256 * KIB: (16, (2, 8)),
    1 * MIB: (8, (1, 4)),
}
NEAR_TOP = 0.95  # the best pp: the smallest whose rate is within 5 % of the sweep's top
FACTOR = 2.0  # eq. 4 counts as right for a size when the best pp is within this factor of it
NO_CAP = 1 << 20  # eq. 4 unclamped: the CLI takes any pp, so the model's max_pp is not the question here


def link_bdp() -> int:
    rtt_ms, mbit = PROFILES[PROFILE]
    return bdp(mbit * 1e6, rtt_ms / 1000)


def predictions(size: int) -> dict[str, int]:
    """Eq. 4 as files in flight (`--pp` = level + 1), for each BDP a connection might be bound by."""
    link = link_bdp()
    window = min(link, OPENSSH_CHANNEL_WINDOW)
    return {
        "link": pp_param(pp_level(link, size, NO_CAP)),
        "window": pp_param(pp_level(window, size, NO_CAP)),
        "engine": pp_param(pp_level(link * SFTP_FILE_RTTS, size, NO_CAP)),
    }


MODELS = {
    "link": "eq. 4, link BDP",
    "window": "eq. 4, window-limited BDP",
    "engine": "engine's SFTP plan (2 x link BDP)",
}
EQ4 = ("link", "window")  # the verdict is on eq. 4 itself; the engine's variant is shown beside it


def case_id(size: int, pp: int) -> str:
    return f"{size // KIB}k-pp{pp}"


def cases(quick: bool) -> list[Case]:
    return [
        Case("e2_pp_eq4", case_id(size, pp), PROFILE, {"pp": pp, "p": 1, "cc": 1, "files": files, "size": size})
        for size, (files, pps) in (QUICK_SETS if quick else SETS).items()
        for pp in pps
    ]


def measure(case: Case, ctx: Context) -> dict[str, Any]:
    prm = case.params
    return copy_fixed(ctx, case, f"papers-{prm['size'] // KIB}k-n{prm['files']}", prm["files"], prm["size"])


def best_pp(sweep: dict[int, float]) -> int:
    """The smallest pp whose rate is within NEAR_TOP of the top: past the knee, more pp buys noise."""
    top = max(sweep.values())
    return min(pp for pp, rate in sweep.items() if rate >= NEAR_TOP * top)


def within(best: int, predicted: int) -> bool:
    return 1 / FACTOR <= best / predicted <= FACTOR


def judge(best: dict[int, int]) -> tuple[str, str, str | None]:
    """Verdict, reason and the eq. 4 BDP the measurement follows, from the best pp per file size."""
    if not best:
        return NOT_MEASURED, "No file size has a sweep of two or more pp values yet.", None

    def fit(model: str) -> tuple[int, float]:
        hits = sum(within(b, predictions(size)[model]) for size, b in best.items())
        spread = sum(abs(math.log2(b / predictions(size)[model])) for size, b in best.items())
        return hits, -spread

    follows = max(EQ4, key=fit)
    hits = fit(follows)[0]
    shown = "; ".join(
        f"{size // KIB} KiB: best pp {b}, eq. 4 {predictions(size)['link']} (link) / {predictions(size)['window']} (window)"
        for size, b in sorted(best.items())
    )
    closest = min(MODELS, key=lambda m: sum(abs(math.log2(b / predictions(s)[m])) for s, b in best.items()))
    rule = (
        f"Best pp = the smallest pp within {1 - NEAR_TOP:.0%} of the sweep's top rate; eq. 4 counts as right for "
        f"a size when that is within a factor {FACTOR:g} of its prediction (pp = level + 1), with the BDP "
        f"({MODELS['link']} or {MODELS['window']}) that fits more sizes. Closest of all three models: "
        f"{MODELS[closest]}."
    )
    missing = len(SETS) - len(best)
    tail = f" {missing} file size(s) not measured yet." if missing else ""
    if hits == len(best) == len(SETS):
        return REPRODUCED, f"{shown}. All sizes follow the {MODELS[follows]}. {rule}", follows
    if hits:
        return IN_PART, f"{shown}. {hits} of {len(best)} size(s) follow the {MODELS[follows]}. {rule}{tail}", follows
    return NOT_REPRODUCED, f"{shown}. No size is within a factor {FACTOR:g} of either. {rule}{tail}", follows


def render(records: list[Record], charts: Path) -> Section:
    if not records:
        return Section("", NOT_MEASURED, "No run of this effect yet.")
    rates = case_medians(records)
    quick = any(r.params.get("files") == QUICK_SETS[64 * KIB][0] and r.params.get("size") == 64 * KIB for r in records)
    sets = QUICK_SETS if quick else SETS
    sweeps: dict[int, dict[int, float]] = {}
    for size, (_, pps) in sets.items():
        sweep = {pp: rates[case_id(size, pp)] for pp in pps if case_id(size, pp) in rates}
        if len(sweep) >= 2:
            sweeps[size] = sweep
    best = {size: best_pp(s) for size, s in sweeps.items()}
    verdict, why, follows = judge(best)
    rows = []
    for size, (files, pps) in sets.items():
        sweep = sweeps.get(size, {})
        pred = predictions(size)
        edge = ""
        if size in best and best[size] == max(pps):
            edge = " (sweep's top: may be higher)"
        rows.append(
            [
                f"{files} x {size // KIB} KiB",
                ", ".join(f"{pp}: {rate:.0f}" for pp, rate in sorted(sweep.items())) or None,
                f"{best[size]}{edge}" if size in best else None,
                pred["link"],
                pred["window"],
                pred["engine"],
            ]
        )
    table = md_table(
        ["set", "Mbit/s per pp (transfer phase)", "best pp", MODELS["link"], MODELS["window"], MODELS["engine"]],
        rows,
    )
    chart = _chart(sweeps, best, charts)
    link = link_bdp()
    missing = [c.id for c in cases(quick) if c.id not in rates]
    notes = (
        f"BDPs on {PROFILE} ({PROFILES[PROFILE][1]:g} Mbit/s x {PROFILES[PROFILE][0]:g} ms): the link's is "
        f"{link / MIB:.2f} MiB; one SFTP upload connection can keep no more than OpenSSH's session channel window "
        f"of {OPENSSH_CHANNEL_WINDOW // MIB} MiB in flight (the receiving sshd advertises it and never grows it; "
        "`OPENSSH_CHANNEL_WINDOW` in airflow_transfer/tuning/models.py), so the window-limited BDP is "
        f"{min(link, OPENSSH_CHANNEL_WINDOW) / MIB:.2f} MiB. Predictions are in `--pp` units, files in flight, "
        "which is the paper's level + 1. The third model is what the engine's planners use over SFTP: a file "
        "costs two control round trips there (OPEN's handle, CLOSE's status), so they aim eq. 4 at twice the "
        "BDP (docs/tuning.md); eq. 3 charges a file one, and effect 1's last column measures what one costs here "
        f"at pp 1. Measurement follows: {MODELS[follows] if follows else 'not decided yet'}. "
        f"Flags: `{' '.join(fixed_flags(8))}` with pp swept, medians of up to {max(r.rep for r in records)} repetition(s)."
        + (f" Cases not measured yet: {', '.join(missing)}." if missing else "")
        + failures(records)
    )
    return Section(table, verdict, why, [chart] if chart else [], notes)


def _chart(sweeps: dict[int, dict[int, float]], best: dict[int, int], charts: Path) -> str | None:
    if not sweeps:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4 * len(sweeps), 3.6), squeeze=False)
    styles = {"link": ("tab:red", "--"), "window": ("tab:green", ":"), "engine": ("tab:gray", "-.")}
    for ax, (size, sweep) in zip(axes[0], sorted(sweeps.items())):
        pps = sorted(sweep)
        ax.plot(pps, [sweep[pp] for pp in pps], marker="o", color="tab:blue", label="measured")
        ax.plot([best[size]], [sweep[best[size]]], marker="*", markersize=14, color="tab:blue", linestyle="")
        for model, pp in predictions(size).items():
            color, style = styles[model]
            ax.axvline(pp, color=color, linestyle=style, label=f"{MODELS[model]}: {pp}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("pp (files in flight)")
        ax.set_title(f"{size // KIB} KiB files, {PROFILE}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("Mbit/s (transfer phase)")
    name = "e2-pp-vs-eq4.png"
    fig.tight_layout()
    fig.savefig(charts / name, dpi=110)
    plt.close(fig)
    return name
