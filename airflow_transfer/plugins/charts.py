"""Server-side SVG charts for the UI pages (no JavaScript, no internet).

The chunk chart follows paper 000's Fig. 18: time on the x axis, one bar per
chunk spanning the seconds it ran, its height the chunk's throughput, and the
pp / p / cc it ran with written over it.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

WIDTH, HEIGHT = 860, 320
MARGIN = {"left": 64, "right": 20, "top": 34, "bottom": 46}
# Colour by concurrency, the knob that moves throughput most on these links.
PALETTE = ("#4e79a7", "#59a14f", "#f28e2b", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")


def nice_ceiling(value: float) -> float:
    """The next 1, 2, 2.5 or 5 x 10^k at or above ``value`` (axis maxima people can read)."""
    if value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10**exp
        if candidate >= value * (1 - 1e-9):
            return candidate
    return 10.0 ** (exp + 1)


def _fmt(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}".rstrip("0").rstrip(".")


def _label_width(chunk: dict[str, Any]) -> float:
    """Pixels the "(pp,p,cc)" label needs at the chart's 10 px font."""
    return 6.0 * len(f"({chunk['pp']},{chunk['p']},{chunk['cc']})") + 4


def chunk_chart(chunks: list[dict[str, Any]], *, average_mbit: float | None = None) -> str:
    """SVG of chunks over time (``t0``, ``t1``, ``throughput_mbit``, ``pp``, ``p``, ``cc``, ``chunk_id``)."""
    left, right, top, bottom = MARGIN["left"], MARGIN["right"], MARGIN["top"], MARGIN["bottom"]
    plot_w, plot_h = WIDTH - left - right, HEIGHT - top - bottom
    parts = [
        f'<svg class="chunk-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="Throughput per chunk over time">',
        "<style>text{font-family:sans-serif;font-size:11px;fill:#333}.axis{stroke:#555}"
        ".grid{stroke:#ddd}.lbl{font-size:10px}</style>",
    ]
    if not chunks:
        parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no chunks recorded yet</text>')
        parts.append("</svg>")
        return "".join(parts)
    t_max = max(c["t1"] for c in chunks) or 1.0
    narrow = any(plot_w * (c["t1"] - c["t0"]) / t_max < _label_width(c) for c in chunks)
    # room above the tallest bar for its label (upright labels of narrow bars need more)
    headroom = 1.35 if narrow else 1.12
    y_max = nice_ceiling(max(max(c["throughput_mbit"] for c in chunks), average_mbit or 0.0) * headroom)

    def x(t: float) -> float:
        return left + plot_w * t / t_max

    def y(v: float) -> float:
        return top + plot_h * (1 - v / y_max)

    for i in range(6):  # horizontal grid and y labels
        v = y_max * i / 5
        parts.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>')
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    t_step = nice_ceiling(t_max / 6)
    t = 0.0
    while t <= t_max * 1.0001:
        parts.append(
            f'<line class="axis" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}"/>'
        )
        parts.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_fmt(t)}</text>')
        t += t_step
    parts.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/>')
    # Without recorded start times the bars are laid end to end; say so, since
    # chunks mapped over several workers may in fact have overlapped.
    x_label = (
        "seconds since the transfer started"
        if all(c.get("timed") for c in chunks)
        else "seconds of chunk work, chunks end to end in the order they were recorded"
    )
    parts.append(f'<text x="{left + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">{x_label}</text>')
    parts.append(
        f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        "throughput (Mbit/s)</text>"
    )

    cc_values = sorted({c["cc"] for c in chunks})
    for c in chunks:
        x0, x1 = x(c["t0"]), x(c["t1"])
        w = max(x1 - x0 - 1.0, 1.5)  # a hairline gap between chunks that ran back to back
        y0 = y(c["throughput_mbit"])
        colour = PALETTE[cc_values.index(c["cc"]) % len(PALETTE)]
        label = f"{c['pp']},{c['p']},{c['cc']}"
        tip = (
            f"{c['chunk_id']}: pp={c['pp']} p={c['p']} cc={c['cc']}, {c['files']} files, "
            f"{c['throughput_mbit']:.1f} Mbit/s over {c['seconds']:.2f} s"
        )
        parts.append(
            f'<g class="chunk"><title>{escape(tip)}</title>'
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{top + plot_h - y0:.1f}" '
            f'fill="{colour}" fill-opacity="0.85"/>'
        )
        if w >= _label_width(c):
            parts.append(
                f'<text class="lbl" x="{x0 + w / 2:.1f}" y="{y0 - 4:.1f}" text-anchor="middle">({escape(label)})</text>'
            )
        else:  # too narrow: write it upright above the bar so neighbours do not overlap
            parts.append(
                f'<text class="lbl" transform="translate({x0 + w / 2 + 3.5:.1f} {y0 - 4:.1f}) '
                f'rotate(-90)">({escape(label)})</text>'
            )
        parts.append("</g>")
    if average_mbit:
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(average_mbit):.1f}" '
            f'y2="{y(average_mbit):.1f}" stroke="#222" stroke-dasharray="5 4"/>'
        )
        # named in the legend row, where it cannot collide with bar labels
        parts.append(
            f'<line x1="{left + plot_w - 230}" x2="{left + plot_w - 200}" y1="{top - 20}" '
            f'y2="{top - 20}" stroke="#222" stroke-dasharray="5 4"/>'
        )
        parts.append(
            f'<text x="{left + plot_w - 194}" y="{top - 16}">transfer average {_fmt(average_mbit)} Mbit/s</text>'
        )
    # legend: colour = cc; bar labels are (pp,p,cc) as in the paper's figure
    lx = left
    parts.append(f'<text x="{lx}" y="{top - 16}">labels: (pp,p,cc)   colour: cc =</text>')
    lx += 190
    for i, cc in enumerate(cc_values[:8]):
        parts.append(
            f'<rect x="{lx}" y="{top - 26}" width="12" height="12" fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{lx + 16}" y="{top - 16}">{cc}</text>'
        )
        lx += 44
    parts.append("</svg>")
    return "".join(parts)


def progress_bar(counts: dict[str, dict[str, int]]) -> str:
    """A one-line SVG of the journal's files by state (done / partial / pending / failed)."""
    colours = {"done": "#59a14f", "partial": "#edc948", "pending": "#bab0ac", "failed": "#e15759"}
    total = sum(v["files"] for v in counts.values())
    width, height = 860, 18
    parts = [
        f'<svg class="progress-bar" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="files by state">'
    ]
    if total:
        x = 0.0
        for state in ("done", "partial", "pending", "failed"):
            n = counts.get(state, {}).get("files", 0)
            if not n:
                continue
            w = width * n / total
            parts.append(
                f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{colours[state]}">'
                f"<title>{state}: {n} files</title></rect>"
            )
            x += w
    else:
        parts.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#eee"/>')
    parts.append("</svg>")
    return "".join(parts)
