"""A benchmark file of docs/bench/ (shape in docs/bench/README.md) drawn as an inline SVG line chart:
ms/step on a log scale against the presets, one labelled line per backend, the device in the title.
Drawn on the server at render time, so the page needs no chart script and the figures live in one
JSON file that a benchmark command can rewrite. Its theme is the page's: the SVG names no colour but its
lines' (classes chart-title, chart-device, tick, axis, grid, series-label; docs.css colours them for light
and dark), and it scales down with the column (a viewBox, no fixed size).

Eight lines can be told apart. A file with more series (`tinygpt bench --all` writes one per backend:
a dozen on a CPU box) names a `family` for each, and the chart draws one line per family, the
fastest member at each preset; the file keeps every series (its PNG plots show them all)."""
from __future__ import annotations

import hashlib
import json
import math
import textwrap
from html import escape
from pathlib import Path

# Okabe–Ito: eight colours that stay distinct for the common colour-vision deficiencies. Its black is the
# text's colour (currentColor), so that line stays visible on a dark theme's background; everything else
# that is not a line's own colour (text, grid, background) is set by docs.css through the classes below.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "currentColor", "#f0e442")
WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 64, 250, 48, 44  # the right margin holds the line labels (up to ~30 characters)
LABEL_PX = 8  # a line label's width per character (12 px bold): a longer label widens the chart, not the plot
TITLE_CHARS, TITLE_LINE = 74, 18  # the title (15 px bold) wraps at about the chart's width
LABEL_GAP = 14  # px between two line labels, so labels of lines that end close together stay legible
DEVICE_CHARS, LINE = 96, 15  # the device line wraps at about the chart's width, each further line 15 px lower


def load_bench(path: Path) -> dict:
    """Reads and checks one benchmark file; the errors name the file and what is wrong."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    for key in ("title", "device", "date", "command", "presets", "series"):
        if key not in data:
            raise ValueError(f"{path}: no {key!r} key")
    if not data["series"]:
        raise ValueError(f"{path}: 'series' is empty")
    for s in data["series"]:
        unknown = set(s["ms_per_step"]) - set(data["presets"])
        if unknown:
            raise ValueError(f"{path}: series {s['backend']!r} has presets {sorted(unknown)} not in 'presets'")
        if not s["ms_per_step"]:
            raise ValueError(f"{path}: series {s['backend']!r} has no ms/step")
        if any(not (isinstance(v, (int, float)) and v > 0) for v in s["ms_per_step"].values()):
            raise ValueError(f"{path}: series {s['backend']!r} has a ms/step that is not a positive number")
    if len(chart_series(data)) > len(COLOURS):
        raise ValueError(f"{path}: {len(data['series'])} series in {len(chart_series(data))} families, at most "
                         f"{len(COLOURS)} lines can be told apart (give each series a 'family')")
    return data


def chart_series(data: dict) -> list[dict]:
    """The lines to draw: every series when they fit, else one per family (a series without a family is
    its own), each preset's figure the family's fastest, labelled "<family> (best)"."""
    series = data["series"]
    if len(series) <= len(COLOURS):
        return series
    families: dict[str, list[dict]] = {}
    for s in series:
        families.setdefault(s.get("family", s["backend"]), []).append(s)
    lines = []
    for family, members in families.items():
        if len(members) == 1:
            lines.append(members[0])
            continue
        best = {p: min(m["ms_per_step"][p] for m in members if p in m["ms_per_step"])
                for p in data["presets"] if any(p in m["ms_per_step"] for m in members)}
        lines.append({"backend": f"{family} (best)", "ms_per_step": best})
    return lines


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 × 10^k between lo and hi (inclusive of the decades around them)."""
    ticks = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        ticks += [m * 10.0 ** k for m in (1, 2, 5) if lo <= m * 10.0 ** k <= hi]
    return ticks


def spread_labels(ys: list[float], gap: float, top: float, bottom: float) -> list[float]:
    """Label positions near `ys`, in the same order, at least `gap` apart and within [top, bottom]."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    placed = [0.0] * len(ys)
    last = top - gap
    for i in order:
        placed[i] = last = max(ys[i], last + gap)
    overflow = last - bottom
    if overflow > 0:  # pushed past the bottom: shift the whole stack up, as far as the top allows
        for i in order:
            placed[i] = max(top, placed[i] - overflow)
    return placed


def fmt_ms(v: float) -> str:
    return f"{v:g}" if v < 1000 else f"{v / 1000:g} s"


def bench_svg(data: dict) -> str:
    presets, series = data["presets"], chart_series(data)
    values = [v for s in series for v in s["ms_per_step"].values()]
    lo, hi = 10 ** math.floor(math.log10(min(values))), 10 ** math.ceil(math.log10(max(values)))
    hi = max(hi, lo * 10)  # every value one power of ten: still a decade tall
    # a long title or device name (GPU, driver, CPU and runtimes) takes more lines; the plot moves down for them
    heading = textwrap.wrap(data["title"], TITLE_CHARS, break_on_hyphens=False)
    device = textwrap.wrap(f"{data['device']} · {data['date']}", DEVICE_CHARS, break_on_hyphens=False)
    extra = TITLE_LINE * (len(heading) - 1) + LINE * (len(device) - 1)
    top, height = TOP + extra, HEIGHT + extra
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - BOTTOM
    width = LEFT + plot_w + max(RIGHT, 16 + LABEL_PX * max(len(s["backend"]) for s in series))

    def x(preset: str) -> float:
        return LEFT + plot_w * (presets.index(preset) + 0.5) / len(presets)

    def y(ms: float) -> float:
        return top + plot_h * (1 - (math.log10(ms) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    title = f"{data['title']} — {data['device']}"
    # one id per chart, so that each of a page's charts is labelled by its own title
    title_id = "chart-" + hashlib.sha1(f"{title} {data['date']}".encode()).hexdigest()[:10]
    out = [f'<svg class="bench-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'role="img" aria-labelledby="{title_id}">',
           f'<title id="{title_id}">{escape(title)}</title>',
           *(f'<text class="chart-title" x="{LEFT}" y="{18 + TITLE_LINE * i}">{escape(text)}</text>'
             for i, text in enumerate(heading)),
           *(f'<text class="chart-device" x="{LEFT}" y="{34 + TITLE_LINE * (len(heading) - 1) + LINE * i}">'
             f'{escape(text)}</text>' for i, text in enumerate(device))]
    for t in log_ticks(lo, hi):
        out.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(t):.1f}" y2="{y(t):.1f}"/>'
                   f'<text class="tick" x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{fmt_ms(t)}</text>')
    for p in presets:
        out.append(f'<text class="tick" x="{x(p):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{escape(p)}</text>')
    out.append(f'<text class="axis" transform="translate(14 {top + plot_h / 2}) rotate(-90)" '
               f'text-anchor="middle">ms/step (log scale)</text>')
    out.append(f'<text class="axis" x="{LEFT + plot_w / 2}" y="{height - 6}" text-anchor="middle">preset</text>')

    ends = []
    for s, colour in zip(series, COLOURS):
        points = [(x(p), y(s["ms_per_step"][p])) for p in presets if p in s["ms_per_step"]]
        name = escape(s["backend"])
        out.append(f'<polyline class="series" data-series="{name}" fill="none" stroke="{colour}" stroke-width="2" '
                   f'points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in points)}"/>')
        for (px, py), p in zip(points, [p for p in presets if p in s["ms_per_step"]]):
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
                       f'<title>{name}, {escape(p)}: {s["ms_per_step"][p]:g} ms/step</title></circle>')
        ends.append((points[-1][1], name, colour))
    label_ys = spread_labels([e[0] for e in ends], LABEL_GAP, top, top + plot_h)
    for (_, name, colour), ly in zip(ends, label_ys):
        out.append(f'<text class="series-label" x="{LEFT + plot_w + 8}" y="{ly + 4:.1f}" fill="{colour}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)
