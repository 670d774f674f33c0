"""LoRA's cost beside full training (a benchmark, not a test): ms per training step and arena bytes of
the C++ core's LoRA mode (tg_create_lora) and of a full model of the same preset, measured side by
side in one run:

  python -m bench.cpu.lora [--preset large] [--threads 1,2] [--targets q_proj,v_proj] [--rank 8]
                           [--rounds 5] [--steps 4] [--wasm relaxed] [--wasm-dir DIR]

Both models get the same base (the init stream of the preset's seed), the same corpus and stream;
a round times --steps steps of the full model, then of the LoRA model, then the other order, and
each figure is the median over all rounds' steps, so a slow spell of a shared machine hits both
alike. The memory figures are exact: tg_arena_bytes is the one allocation a model makes
(wasm/tests/test_no_alloc.cpp checks that nothing else allocates in a step), and the budget it is
held to is base weights (4P) + the full model's activations (its arena less weights, gradients, m and
v: 16P) + adapters and their moments (12Q).

--wasm BUILD also runs bench/wasm/lora_node.mjs: the same comparison in Node on that WebAssembly
build (build it with scripts/build_wasm.sh; --wasm-dir is its output folder, default
$TINYGPT_BUILD/wasm). Run it alone on a shared machine (flock /tmp/tinygpt-bench.lock ...).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.machine import cpu_model
from python_ref.config import init_std, model_config, presets_file, train_config
from python_ref.lora import LoRAConfig, adapter_manifest, lora_defaults, target_mask
from scripts.api_ctypes import Binding

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))


class Core:
    """The native core through its C API: a full model and a LoRA model of one preset."""

    def __init__(self, lib_path: Path, preset: str, lora: LoRAConfig, threads: int, corpus: bytes):
        self.binding = b = Binding(lib_path)
        self.lib = lib = b.lib
        cfg, t = model_config(preset), train_config(preset)
        self.tokens = t.batch * cfg.ctx
        config = b.struct("tg_config", cfg.to_json() | {"initStd": init_std()})
        lora_struct = b.struct("tg_lora_config", {"rank": lora.rank, "alpha": lora.alpha,
                                                  "targets": target_mask(lora.targets)})
        self.full = lib.tg_create(ctypes.byref(config), t.batch, threads)
        self.lora = lib.tg_create_lora(ctypes.byref(config), ctypes.byref(lora_struct), t.batch, threads)
        if not self.full or not self.lora:
            raise RuntimeError(lib.tg_last_error().decode())
        lora_lr = lora_defaults()["lr"]
        for h, lr, decay in ((self.full, t.lr, t.weightDecay), (self.lora, lora_lr, lora_defaults()["weightDecay"])):
            self.check(lib.tg_init(h, t.seed))
            self.check(lib.tg_set_hyper(h, lr, t.beta1, t.beta2, t.eps, decay, t.gradClip))
            self.check(lib.tg_set_corpus(h, corpus, len(corpus), t.valFraction))
        self.check(lib.tg_lora_init(self.lora, t.seed))
        self.threads = lib.tg_n_threads(self.full)

    def check(self, code):
        if code < 0:
            raise RuntimeError(self.lib.tg_last_error().decode())
        return code

    def steps(self, handle, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.check(self.lib.tg_train_step(handle))
            out.append(time.perf_counter() - t0)
        return out

    def close(self):
        self.lib.tg_destroy(self.full)
        self.lib.tg_destroy(self.lora)


def native(lib_path: Path, preset: str, lora: LoRAConfig, threads: int, corpus: bytes, rounds: int,
           steps: int) -> dict:
    core = Core(lib_path, preset, lora, threads, corpus)
    try:
        core.steps(core.full, 1)  # warm-up: first touches of the arenas
        core.steps(core.lora, 1)
        full, lora_ms = [], []
        for r in range(rounds):
            order = [(core.full, full), (core.lora, lora_ms)]
            for handle, times in order if r % 2 == 0 else order[::-1]:
                times += core.steps(handle, steps)
        return {"threads": core.threads, "full_ms": 1e3 * statistics.median(full),
                "lora_ms": 1e3 * statistics.median(lora_ms),
                "full_arena": core.lib.tg_arena_bytes(core.full), "lora_arena": core.lib.tg_arena_bytes(core.lora)}
    finally:
        core.close()


def wasm(build: str, wasm_dir: Path, preset: str, lora: LoRAConfig, threads: int, corpus_path: Path, rounds: int,
         steps: int) -> dict:
    cfg, t = model_config(preset), train_config(preset)
    spec = {"build": build, "wasmDir": str(wasm_dir), "threads": threads, "rounds": rounds, "steps": steps,
            "config": cfg.to_json() | {"initStd": init_std(), "batch": t.batch},
            "training": presets_file()["training"], "lora": {"rank": lora.rank, "alpha": lora.alpha,
                                                             "targets": target_mask(lora.targets),
                                                             "lr": lora_defaults()["lr"],
                                                             "weightDecay": lora_defaults()["weightDecay"]},
            "corpus": str(corpus_path)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    flags = ["--experimental-wasm-relaxed-simd"] if build == "relaxed" else []
    try:
        proc = subprocess.run(["node", *flags, str(ROOT / "bench" / "wasm" / "lora_node.mjs"), f.name],
                              capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"error": proc.stderr[-2000:]}
    if "error" in result:
        raise RuntimeError(f"lora_node.mjs failed: {result['error']}")
    return result


def row(what: str, r: dict) -> str:
    return (f"| {what} | {r['full_ms']:.1f} | {r['lora_ms']:.1f} | **{r['lora_ms'] / r['full_ms']:.2f}x** | "
            f"{r['full_arena'] / 2**20:.1f} | {r['lora_arena'] / 2**20:.1f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="large")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--targets", default=",".join(lora_defaults()["targets"]), help="comma-separated, or 'all'")
    ap.add_argument("--rank", type=int, default=lora_defaults()["rank"])
    ap.add_argument("--alpha", type=float, default=lora_defaults()["alpha"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4, help="steps of each model per round")
    ap.add_argument("--wasm", default=None, help="also this WebAssembly build in Node (relaxed, threads, simd)")
    ap.add_argument("--wasm-dir", default=str(BUILD / "wasm"))
    ap.add_argument("--lib", default=str(BUILD / "native" / "libtinygpt.so"))
    args = ap.parse_args(argv)
    from python_ref.finetune import parse_targets
    lora = LoRAConfig(args.rank, args.alpha, parse_targets(args.targets))
    cfg, t = model_config(args.preset), train_config(args.preset)
    corpus_path = ROOT / "site" / "static" / "data" / "tinyshakespeare.txt"
    corpus = corpus_path.read_bytes()
    P, Q = cfg.param_count(), sum(r * c for _, (r, c) in adapter_manifest(cfg, lora))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; preset {args.preset} (P = {P:,}, batch {t.batch} x "
          f"ctx {cfg.ctx}); LoRA r={lora.rank} alpha={lora.alpha:g} on {','.join(lora.targets)} (Q = {Q:,})")
    print(f"command: python -m bench.cpu.lora --preset {args.preset} --threads {args.threads} --targets "
          f"{args.targets} --rank {args.rank} --rounds {args.rounds} --steps {args.steps}"
          + (f" --wasm {args.wasm}" if args.wasm else ""))
    print("\n| engine | full step ms | LoRA step ms | LoRA / full | full arena MiB | LoRA arena MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    results = []
    for threads in (int(x) for x in args.threads.split(",")):
        r = native(Path(args.lib), args.preset, lora, threads, corpus, args.rounds, args.steps)
        results.append(r)
        print(row(f"C++ native, {r['threads']} thread(s)", r), flush=True)
        if args.wasm:
            w = wasm(args.wasm, Path(args.wasm_dir), args.preset, lora, threads, corpus_path, args.rounds, args.steps)
            print(row(f"WASM {args.wasm}, Node, {w['threads']} thread(s)", w), flush=True)
    r = results[0]
    activations = r["full_arena"] - 16 * P
    budget = 4 * P + activations + 12 * Q
    print(f"\nmemory: LoRA arena {r['lora_arena']:,} bytes <= budget {budget:,} = base weights 4P {4 * P:,} + "
          f"activations {activations:,} (the full arena {r['full_arena']:,} less 16P) + adapters and moments "
          f"12Q {12 * Q:,}: {'yes' if r['lora_arena'] <= budget else 'NO'} ({r['lora_arena'] / budget:.2f} of it)")


if __name__ == "__main__":
    main()
