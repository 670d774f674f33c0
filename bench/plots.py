"""The PNG plots of a `tinygpt bench --all` file (bench.json): ms/step per preset per backend, each
backend's speed relative to the best PyTorch step on the machine, and decode tokens/s with the KV
cache against a full recompute. matplotlib (Agg, no display) is imported only here, so a machine
without it still writes the JSON and draws these later (`tinygpt bench --plot FILE.json`).

One colour per family (PyTorch CPU, C++ native, WASM in Node, …), one marker and dash per member, so
a dozen lines stay apart; the device is named under every title.
"""
from __future__ import annotations

import io
import textwrap
from pathlib import Path

# Okabe–Ito, as server/bench_chart.py: distinct for the common colour-vision deficiencies.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", ":", "-.")
SIZE, DPI = (10, 5.6), 100  # 1000 x 560 px: readable on the docs page, well under 120 KB


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_files(stem: Path) -> dict[str, Path]:
    """Where the plots of a bench file named stem.json go (beside it unless told otherwise)."""
    return {"step_time": stem.with_name(stem.name + "-step-time.png"),
            "vs_pytorch": stem.with_name(stem.name + "-vs-pytorch.png"),
            "decode": stem.with_name(stem.name + "-decode.png")}


def draw_plots(data: dict, stem: Path) -> list[Path]:
    """Draws every plot the data has figures for; returns the files written."""
    plt = _pyplot()
    files = plot_files(stem)
    written = [_step_time(plt, data, files["step_time"])]
    if data.get("ratios", {}).get("series"):
        written.append(_vs_pytorch(plt, data, files["vs_pytorch"]))
    if data.get("decode", {}).get("results"):
        written.append(_decode(plt, data, files["decode"]))
    return written


def _styles(series: list[dict]) -> dict[str, dict]:
    """{backend: matplotlib line style}: the family's colour, the member's marker and dash. Taken over
    every series, so a backend keeps its look in every plot."""
    families = list(dict.fromkeys(s.get("family", s["backend"]) for s in series))
    seen: dict[str, int] = {}
    styles = {}
    for s in series:
        family = s.get("family", s["backend"])
        n = seen[family] = seen.get(family, -1) + 1
        styles[s["backend"]] = {"color": COLOURS[families.index(family) % len(COLOURS)],
                                "marker": MARKERS[n % len(MARKERS)], "linestyle": DASHES[n % len(DASHES)],
                                "linewidth": 1.6, "markersize": 5}
    return styles


def _figure(plt, data: dict, title: str, ylabel: str):
    from matplotlib import ticker

    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    device = textwrap.fill(f"{data['device']} · {data['date']}", 110)
    ax.set_title(f"{title}\n{device}", fontsize=10, loc="left")
    ax.set_yscale("log")
    # 1, 2, 5 x 10^k written as plain numbers: "20", not "2 x 10^1"
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylabel(ylabel)
    ax.set_xlabel("preset")
    ax.grid(True, which="both", axis="y", alpha=0.3)
    return fig, ax


def _x(data: dict, values: dict) -> tuple[list[int], list[float]]:
    presets = [p for p in data["presets"] if p in values]
    return [data["presets"].index(p) for p in presets], [values[p] for p in presets]


def _finish(plt, fig, ax, data: dict, path: Path) -> Path:
    ax.set_xticks(range(len(data["presets"])), data["presets"])
    ax.set_xlim(-0.3, len(data["presets"]) - 0.7)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.tight_layout()
    _save_small(fig, path)
    plt.close(fig)
    return path


def _save_small(fig, path: Path) -> None:
    """The PNG with a 256-colour palette: a third of the RGBA file's size, and lines and text look
    the same (Pillow comes with matplotlib)."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    buffer.seek(0)
    Image.open(buffer).convert("RGB").quantize(colors=256).save(path, optimize=True)


def _step_time(plt, data: dict, path: Path) -> Path:
    fig, ax = _figure(plt, data, data["title"], "ms per training step (log scale; lower is faster)")
    styles = _styles(data["series"])
    for s in data["series"]:
        style = styles[s["backend"]]
        xs, ys = _x(data, s["ms_per_step"])
        ax.plot(xs, ys, label=s["backend"], **style)
        if "min" in s and "max" in s:  # the spread of the rounds, where there were several
            lo, hi = _x(data, s["min"])[1], _x(data, s["max"])[1]
            if len(lo) == len(ys):
                ax.fill_between(xs, lo, hi, color=style["color"], alpha=0.12, linewidth=0)
    return _finish(plt, fig, ax, data, path)


def _vs_pytorch(plt, data: dict, path: Path) -> Path:
    ratios = data["ratios"]
    fig, ax = _figure(plt, data, f"Speed relative to {ratios['reference']} (higher is faster)",
                      "PyTorch ms/step ÷ this backend's (log scale)")
    ax.axhline(1.0, color="#444444", linewidth=1.2, label=f"{ratios['reference']} = 1")
    styles = _styles(data["series"])
    for s in data["series"]:
        if s["backend"] in ratios["series"]:
            xs, ys = _x(data, ratios["series"][s["backend"]])
            ax.plot(xs, ys, label=s["backend"], **styles[s["backend"]])
    return _finish(plt, fig, ax, data, path)


def _decode(plt, data: dict, path: Path) -> Path:
    decode = data["decode"]
    fig, ax = _figure(plt, data, f"Decode: tokens/s generating {decode['new_tokens']} new tokens, KV cache (solid) "
                      "vs full recompute (dashed)", "tokens/s (log scale; higher is faster)")
    engines = list(dict.fromkeys(r["engine"] for r in decode["results"]))
    for i, engine in enumerate(engines):
        rows = [r for r in decode["results"] if r["engine"] == engine]
        colour = COLOURS[i % len(COLOURS)]
        # the two modes must give the same text for the rates to compare (decode_bench.py)
        differ = [r["preset"] for r in rows if r.get("same_tokens") is False]
        warning = f" (tokens differ at {', '.join(differ)})" if differ else ""
        for key, dash, marker, what in (("kv_tokens_per_s", "-", "o", "KV cache"),
                                        ("recompute_tokens_per_s", "--", "x", "recompute")):
            xs, ys = _x(data, {r["preset"]: r[key] for r in rows})
            ax.plot(xs, ys, color=colour, linestyle=dash, marker=marker, linewidth=1.6, markersize=5,
                    label=f"{engine}, {what}{warning}")
    return _finish(plt, fig, ax, data, path)
