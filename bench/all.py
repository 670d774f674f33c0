"""`tinygpt bench --all`: every training backend this machine has, over the presets, in one invocation,
written as one benchmark file (bench.json, docs/bench/README.md's shape plus the raw cells) and PNG
plots (bench/plots.py).

Round-robin: each round measures every (backend, preset) cell once, all of them before the next
round, so a slow spell of a shared machine hits every column; a cell's figure is the median of its
rounds, with min and max kept. Within a round the presets go smallest first and every backend runs
each preset before the next, so the step counts of the bigger presets are sized from the smaller
ones (scaled by FLOPs per step), and a cell whose estimate exceeds --max-cell-seconds is skipped with
that reason rather than stalling the run (the scalar WebAssembly build at the GPU presets, say).

A backend that cannot run here is recorded with the reason; a cell that fails is recorded with its
error, and the run goes on. Decode speed (bench/decode.py: KV cache against a full
recompute) is measured once per engine and preset after the rounds, for the engines of the selected
backends.
"""
from __future__ import annotations

import contextlib
import datetime
import fnmatch
import importlib
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from .torch_step import flops_per_token
from .backends import Backend, Budget, Unavailable
from .catalogue import catalogue
from .machine import describe_machine, device_line, usable_cpus
from python_ref.config import ConfigError, model_config, preset_names, train_config

CPU_PRESETS = ("tiny", "small", "medium", "large")
GPU_PRESETS = ("tiny", "small", "medium", "large", "xl", "huge", "massive")
TITLE = "Training step time per preset, every backend of one machine (fp32)"
WARMUP_STEPS = 2  # what a cell's time estimate adds for its warm-up


def default_presets() -> tuple[str, ...]:
    import torch

    return GPU_PRESETS if torch.cuda.is_available() else CPU_PRESETS


def step_flops(preset: str) -> float:
    config, train_cfg = model_config(preset), train_config(preset)
    return flops_per_token(config) * train_cfg.batch * config.ctx


def select(backends: list[Backend], patterns: str | None) -> list[Backend]:
    """The backends whose key matches one of the comma-separated shell patterns (all without any)."""
    if not patterns:
        return backends
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    if unmatched := [p for p in wanted if not any(fnmatch.fnmatchcase(b.key, p) for b in backends)]:
        raise ConfigError(f"--backends {','.join(unmatched)} matches no backend; the backends are "
                          f"{', '.join(b.key for b in backends)}")
    return [b for b in backends if any(fnmatch.fnmatchcase(b.key, p) for p in wanted)]


def estimate_ms(figures: dict, key: str, preset: str) -> tuple[float, str] | None:
    """(ms/step expected for a cell, what it is based on) from the figures measured so far: the cell's
    own earlier rounds, else the backend's preset closest in FLOPs per step, scaled by FLOPs."""
    if own := figures.get((key, preset)):
        return min(own), "its earlier round"
    measured = [(p, min(v)) for (k, p), v in figures.items() if k == key and v]
    if not measured:
        return None
    target = step_flops(preset)
    nearest, ms = min(measured, key=lambda pm: abs(math.log(step_flops(pm[0]) / target)))
    return ms * target / step_flops(nearest), f"{nearest}, scaled by FLOPs per step"


class Progress:
    """A tqdm bar on stderr with a line per finished cell; a numbered line per cell without tqdm or
    without a terminal (a log file gets no bar redraws)."""

    def __init__(self, total: int, what: str):
        self.total, self.done, self.bar = total, 0, None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, desc=what, unit="cell", file=sys.stderr, dynamic_ncols=True)

    def start(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text[:60])

    def finish(self, text: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def start_backends(backends: list[Backend], stack: contextlib.ExitStack) -> tuple[list[Backend], dict]:
    """(the backends that started, {key: why not} for the others)."""
    running, skipped = [], {}
    for b in backends:
        try:
            b.start(stack)
            running.append(b)
        except Unavailable as e:
            skipped[b.key] = str(e)
        except Exception as e:  # a backend that breaks while starting must not end the run
            skipped[b.key] = f"failed to start: {type(e).__name__}: {e}"
    return running, skipped


def run_rounds(backends: list[Backend], presets: list[str], rounds: int, budget: Budget,
               max_cell_s: float) -> list[dict]:
    """Every cell once per round, round after round; returns one record per cell and round."""
    figures: dict[tuple[str, str], list[float]] = {}
    cells = []
    progress = Progress(rounds * len(presets) * len(backends), "bench --all")
    try:
        for r in range(1, rounds + 1):
            for preset in presets:
                for b in backends:
                    where = f"round {r}/{rounds} {preset} {b.label}"
                    progress.start(where)
                    cell = {"backend": b.key, "preset": preset, "round": r}
                    cell.update(measure_cell(b, preset, budget, max_cell_s, figures))
                    if "ms_per_step" in cell:
                        figures.setdefault((b.key, preset), []).append(cell["ms_per_step"])
                    cells.append(cell)
                    progress.finish(f"{where}: " + (f"{cell['ms_per_step']:.2f} ms/step" if "ms_per_step" in cell
                                                    else cell.get("skipped") or f"error: {cell['error'][:200]}"))
    finally:
        progress.close()
    return cells


def measure_cell(b: Backend, preset: str, budget: Budget, max_cell_s: float, figures: dict) -> dict:
    estimate = estimate_ms(figures, b.key, preset)
    ms = estimate[0] if estimate else None
    if ms is not None and (budget.count(ms) + WARMUP_STEPS) * ms / 1e3 > max_cell_s:
        return {"skipped": f"expected ~{(budget.count(ms) + WARMUP_STEPS) * ms / 1e3:.0f} s ({ms:.0f} ms/step from "
                           f"{estimate[1]}), over --max-cell-seconds {max_cell_s:g}"}
    try:
        result = b.measure(preset, budget, ms)
    except Exception as e:  # recorded in the cell; the other cells still run
        return {"error": f"{type(e).__name__}: {e}".strip()}
    return {k: v for k, v in result.items() if v is not None}


def summarise(backends: list[Backend], presets: list[str], cells: list[dict]) -> tuple[list[dict], dict]:
    """(one series per backend with figures: median, min, max of its rounds; {key: why} of the others)."""
    series, empty = [], {}
    for b in backends:
        mine = [c for c in cells if c["backend"] == b.key]
        runs = {p: [c["ms_per_step"] for c in mine if c["preset"] == p and "ms_per_step" in c] for p in presets}
        runs = {p: v for p, v in runs.items() if v}
        if not runs:
            why = next((c.get("error") or c.get("skipped") for c in mine), "no cell ran")
            empty[b.key] = f"no figure: {why}"
            continue
        s = {"backend": b.label, "key": b.key, "family": b.family, "method": b.method,
             "ms_per_step": {p: round(statistics.median(v), 3) for p, v in runs.items()},
             "min": {p: round(min(v), 3) for p, v in runs.items()},
             "max": {p: round(max(v), 3) for p, v in runs.items()},
             "tokens_per_s": {p: round(train_config(p).batch * model_config(p).ctx / statistics.median(v) * 1e3, 1)
                              for p, v in runs.items()}}
        setup = {p: [c["setup_s"] for c in mine if c["preset"] == p and "setup_s" in c] for p in runs}
        if any(setup.values()):  # compilation, warm-up and capture: kept apart from the step time
            s["setup_s"] = {p: round(statistics.median(v), 2) for p, v in setup.items() if v}
        series.append(s)
    return series, empty


def speed_ratios(series: list[dict], presets: list[str]) -> dict:
    """Each series' speed relative to the best PyTorch step per preset: CUDA's best mode where CUDA ran,
    else PyTorch on the CPU. > 1 is faster than PyTorch."""
    cuda = [s for s in series if s["family"] == "PyTorch CUDA"]
    reference = cuda or [s for s in series if s["family"] == "PyTorch CPU"]
    if not reference:
        return {"skipped": "no PyTorch series to compare with"}
    name = "the best PyTorch CUDA step" if cuda else reference[0]["backend"]
    best = {p: min(s["ms_per_step"][p] for s in reference if p in s["ms_per_step"])
            for p in presets if any(p in s["ms_per_step"] for s in reference)}
    shown = [s for s in series if not (len(reference) == 1 and s is reference[0])]  # that one is the line at 1
    return {"reference": name, "meaning": "reference ms/step ÷ this series' ms/step at the same preset",
            "series": {s["backend"]: {p: round(best[p] / ms, 4) for p, ms in s["ms_per_step"].items() if p in best}
                       for s in shown}}


def run_decode(selected: list[Backend], presets: list[str], new_tokens: int) -> dict:
    """decode_bench for the decode engines of the selected backends, once per preset."""
    # through sys.modules, where the tests put a stand-in (the package attribute would bypass it)
    decode_bench = importlib.import_module("bench.decode")
    keys = [b.key for b in selected]
    engines = [e for e in decode_bench.ENGINES if any(k == e or k.startswith(e + "-") for k in keys)]
    available = decode_bench.available_decode_engines(tuple(engines))
    out = {"new_tokens": new_tokens, "results": [], "skipped": {}, "errors": []}
    for engine in [e for e in engines if e not in available]:
        try:  # raises at once with the reason
            decode_bench.decode_bench(engine, presets[0], new_tokens)
        except RuntimeError as e:
            out["skipped"][engine] = str(e)
    runnable = [e for e in engines if e in available]
    progress = Progress(len(runnable) * len(presets), "decode")
    try:
        for preset in presets:
            for engine in runnable:
                progress.start(f"{preset} {engine}")
                try:
                    r = decode_bench.decode_bench(engine, preset, new_tokens)
                except Exception as e:
                    out["errors"].append({"engine": engine, "preset": preset, "error": f"{type(e).__name__}: {e}"})
                    progress.finish(f"decode {preset} {engine}: error {e}")
                    continue
                out["results"].append(r)
                progress.finish(f"decode {preset} {engine}: KV {r['kv_tokens_per_s']:.0f} tokens/s, recompute "
                                f"{r['recompute_tokens_per_s']:.0f} ({r['speedup']:.1f}x)")
    finally:
        progress.close()
    return out


def measured_machine(series: list[dict], decode: dict) -> dict:
    """The machine, naming Node and Chromium only where a figure came from them."""
    machine = describe_machine()
    families = {s["family"] for s in series}
    engines = {r["engine"] for r in decode.get("results", [])}
    if not families & {"WASM in Node", "WGSL"} and not engines & {"wasm-node", "wgsl-node"}:
        machine["node"] = None
    if not families & {"WASM in Chromium", "WGSL in Chromium"}:
        machine["chromium"] = None
    return machine


def check_options(args) -> tuple[list[str], Budget]:
    presets = args.presets.split(",") if args.presets else list(default_presets())
    if unknown := [p for p in presets if p not in preset_names()]:
        raise ConfigError(f"unknown preset(s) {', '.join(unknown)}; the presets are {', '.join(preset_names())}")
    presets.sort(key=step_flops)  # smallest first: the bigger cells are sized from the smaller ones
    if args.rounds < 1 or args.seconds <= 0 or args.max_cell_seconds <= 0 or args.decode_tokens < 1:
        raise ConfigError("--rounds, --seconds, --max-cell-seconds and --decode-tokens must be positive")
    steps = 3 if args.steps is None else args.steps
    if steps < 1:
        raise ConfigError(f"--steps must be at least 1, got {steps}")
    return presets, Budget(steps=steps, seconds=args.seconds)


def bench_all(args) -> int:
    """The command: measure, write DIR/NAME.json and its plots. Exit 0 unless nothing was measured."""
    presets, budget = check_options(args)
    threads = usable_cpus() if args.threads is None else args.threads
    if threads < 1:
        raise ConfigError(f"--threads must be positive, got {threads}")
    selected = select(catalogue(threads), args.backends)
    out = Path(args.out or ".")
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    with contextlib.ExitStack() as stack:
        running, skipped = start_backends(selected, stack)
        for key, why in skipped.items():
            print(f"skipped {key}: {why}", file=sys.stderr)
        cells = run_rounds(running, presets, args.rounds, budget, args.max_cell_seconds)
        decode = {"skipped": "--no-decode"} if args.no_decode else run_decode(selected, presets, args.decode_tokens)
    series, empty = summarise(running, presets, cells)
    machine = measured_machine(series, decode)
    data = {
        "title": TITLE, "device": device_line(machine), "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "command": "tinygpt " + shlex.join(args.argv), "presets": presets, "series": series,
        "ratios": speed_ratios(series, presets), "skipped": {**skipped, **empty},
        "errors": [c for c in cells if "error" in c], "decode": decode,
        "machine": machine, "settings": {"rounds": args.rounds, "steps": budget.steps, "seconds": budget.seconds,
                                         "max_cell_seconds": args.max_cell_seconds, "threads": threads},
        "cells": cells,
    }
    path = out / f"{args.name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(summary_table(data))
    print(f"wrote {path}")
    if not series:
        print("no backend gave a figure: nothing to plot", file=sys.stderr)
        return 1
    return draw(data, out / args.name, after_measuring=True)


def draw(data: dict, stem: Path, after_measuring: bool = False) -> int:
    """The plots; without matplotlib, after a measurement, how to draw them later (and success)."""
    try:
        from .plots import draw_plots
        written = draw_plots(data, stem)
    except ImportError as e:
        if not after_measuring:
            raise ConfigError(f"the plots need matplotlib ({e}): pip install matplotlib") from None
        print(f"matplotlib is not installed here ({e}), so no plots: on a machine with it, "
              f"`tinygpt bench --plot {stem}.json` draws them", file=sys.stderr)
        return 0
    for p in written:
        print(f"wrote {p} ({p.stat().st_size // 1024} KiB)")
    return 0


def redraw(args) -> int:
    """`tinygpt bench --plot FILE.json`: the plots of a file written earlier, beside it unless --out."""
    from server.bench_chart import load_bench

    source = Path(args.plot)
    try:
        data = load_bench(source)
    except ValueError as e:  # malformed JSON or not a benchmark file: one line, as for any bad input
        raise ConfigError(str(e)) from None
    out = Path(args.out) if args.out else source.parent
    out.mkdir(parents=True, exist_ok=True)
    return draw(data, out / source.stem)


def summary_table(data: dict) -> str:
    """ms/step medians as a Markdown table: a row per series, a column per preset."""
    presets = data["presets"]
    rows = [f"| backend | {' | '.join(presets)} |", "|---|" + "---:|" * len(presets)]
    for s in data["series"]:
        rows.append(f"| {s['backend']} | " + " | ".join(f"{s['ms_per_step'][p]:.2f}" if p in s["ms_per_step"]
                                                        else "–" for p in presets) + " |")
    rows += [f"skipped {key}: {why}" for key, why in data["skipped"].items()]
    return "\n".join(rows)
