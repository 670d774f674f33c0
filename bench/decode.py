"""Decode speed per engine (issue 16): tokens/s of generation with the KV cache and with a full
recompute of the window for every token; the goal is a KV cache >= 10x faster at 512 new tokens.

Every engine starts from the same weights, the preset's seeded initial weights (docs/determinism.md:
bit-identical at every level). They are untrained: the text is noise, but the work per token is a
trained model's. Every engine samples from the same prompt with presets.json's sampling defaults
(temperature, top-k; `seed` keys the sample stream), and both modes follow the one context policy
(a full window restarts from its last ctx/2 tokens: several times in 512 tokens at ctx 32..256), so
both must give the same tokens. `same_tokens` says whether they did; the rates count only if so.

Engines:
  pytorch-cpu, pytorch-cuda  python_ref/sample.py's generate: KVCacheDecoder vs RecomputeDecoder
  native     tg_generate(use_kv_cache) of $TINYGPT_BUILD/native/libtinygpt.so (ctypes)
  wasm-node  the WebAssembly build wasm_loader.js picks in Node (bench/wasm/decode_node.mjs)
  wgsl-node  webgpu/decoder.js's generate vs webgpu/recompute_decoder.js under Node + Dawn
             (bench/webgpu/decode_bench.mjs), on a hardware adapter only: a software one
             (SwiftShader, llvmpipe) runs the WGSL correctly but gives no speed figure. Its recompute
             runs one ctx-long forward, the window padded (recompute_decoder.js says why and what it costs)
  wgsl-chromium  the same two decoders in a module worker of headless Chromium's WebGPU, as the page runs
             them (bench/webgpu/browser_bench.py, time_decode.js), on a hardware adapter only; Chromium
             takes more flags from TINYGPT_CHROMIUM_ARGS (a GPU server without a display: --use-angle=vulkan)
Each mode is timed after an untimed warm-up of both. native, wasm-node and the WGSL engines take rounds of the two
modes in turn and keep each mode's median (ROUNDS: at least 3, more while the KV cache's rounds add up to
less than half a second, at most 15), as a tiny model's 512 tokens take 10-40 ms there and one run of the
same code read 3,484 and 17,180 tokens/s minutes apart; the PyTorch engines, 0.3 s and more a round, are
timed once. A rate is new_tokens over the time of the whole generate call (the prompt, one byte by default,
included).

    python -m bench.decode --engines pytorch-cpu,native,wasm-node --presets tiny,small \\
        --new-tokens 512 --out decode.json
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from .torch_step import _sync
from python_ref.config import init_std, model_config, sampling_defaults, train_config
from python_ref.model import TinyGPT
from python_ref.resources import CHECKOUT
from python_ref.sample import check_sampling_args, generate

ENGINES = ("pytorch-cpu", "pytorch-cuda", "native", "wasm-node", "wgsl-node", "wgsl-chromium")
DEFAULT_PRESETS = "tiny,small,medium,large"
WARMUP_TOKENS = 16
# rounds of both modes in turn (native here; wasm-node and the WGSL engines get it in their job): at least `min`,
# then more while the KV cache's rounds add up to less than `seconds`, at most `max`
ROUNDS = {"min": 3, "max": 15, "seconds": 0.5}
RELAXED_SIMD_FLAG = "--experimental-wasm-relaxed-simd"  # Node 20 has relaxed SIMD only behind it


def build_dir() -> Path | None:
    """Where `make build` put the native library and the WebAssembly builds (None outside a checkout)."""
    if CHECKOUT is None:
        return None
    return Path(os.environ.get("TINYGPT_BUILD", CHECKOUT / "build"))


def node_json(script: Path, job: dict, flags: tuple[str, ...] = ()) -> dict:
    """Runs a Node script of the checkout with `job` as JSON on stdin; returns its last JSON line.
    Dawn may print its own lines on stdout, hence the last line that is an object."""
    proc = subprocess.run(["node", *flags, str(script)], input=json.dumps(job), capture_output=True, text=True,
                          cwd=CHECKOUT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}"}
    if "error" in result:
        raise RuntimeError(f"{script.relative_to(CHECKOUT)} failed: {result['error']}")
    return result


@functools.lru_cache(maxsize=1)
def wasm_node_flags() -> tuple[str, ...]:
    """The relaxed-SIMD flag where this Node accepts it (the loader then picks the relaxed build)."""
    accepted = subprocess.run(["node", RELAXED_SIMD_FLAG, "-e", "0"], capture_output=True).returncode == 0
    return (RELAXED_SIMD_FLAG,) if accepted else ()


@functools.lru_cache(maxsize=1)
def wgsl_adapter() -> dict:
    """{adapter, software} of the adapter Node + Dawn offers here, or {error}."""
    try:
        return node_json(CHECKOUT / "bench/webgpu/decode_bench.mjs", {"probe": True})
    except RuntimeError as e:
        return {"error": str(e)}


def unavailable_reason(engine: str, allow_software_gpu: bool = False) -> str | None:
    """Why `engine` cannot give a figure on this machine, or None when it can."""
    if engine not in ENGINES:
        return f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}"
    if engine == "pytorch-cpu":
        return None
    if engine == "pytorch-cuda":
        return None if torch.cuda.is_available() else f"torch {torch.__version__} sees no CUDA GPU"
    if CHECKOUT is None:
        return f"{engine} runs from a checkout of the repository (its build and scripts are not installed)"
    if engine == "native":
        lib = build_dir() / "native/libtinygpt.so"
        return None if lib.exists() else f"{lib} is missing: run `make build`"
    if engine == "wgsl-chromium":
        from .js_backends import chromium_webgpu_refusal

        if allow_software_gpu:
            return None if shutil.which("chromium") else "no `chromium` on PATH"
        return chromium_webgpu_refusal()
    if shutil.which("node") is None:
        return "no `node` on PATH"
    if engine == "wasm-node":
        builds = json.loads((CHECKOUT / "wasm/builds.json").read_text())["builds"]
        missing = [b["name"] for b in builds if "node" in b["environment"]
                   and not (build_dir() / "wasm" / b["name"] / "tinygpt.mjs").exists()]
        if missing or not (CHECKOUT / "site/static/wasm/builds.js").exists():
            what = ", ".join(missing) or "site/static/wasm/builds.js"
            return f"WebAssembly builds missing ({what}): run `make build`"
        return None
    if not (CHECKOUT / "webgpu/node_modules/webgpu").exists():
        return "webgpu/node_modules/webgpu (the npm `webgpu` package) is missing: run `make setup`"
    adapter = wgsl_adapter()
    if "error" in adapter:
        return f"no WebGPU adapter in Node: {adapter['error'].splitlines()[0]}"  # the message, not the stack
    if adapter["software"] and not allow_software_gpu:
        return f"Node's WebGPU adapter is software ({adapter['adapter']}): correct, not fast, so no speed figure"
    return None


def available_decode_engines(engines: tuple[str, ...] = ENGINES) -> list[str]:
    """Those of `engines` that give a figure here (each one asked, Chromium's by starting it)."""
    return [e for e in engines if unavailable_reason(e) is None]


def threads_label(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


# ---- one engine: both modes, {kv_seconds, kv_tokens, recompute_seconds, recompute_tokens, ...} --------------

def run_pytorch(device: str, threads: int | None, preset: str, new_tokens: int, prompt: bytes, sampling: dict) -> dict:
    dev = torch.device(device)
    model = TinyGPT(model_config(preset), train_config(preset).seed).to(dev)
    threads_before = torch.get_num_threads()
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(threads)

    def timed(use_cache: bool, n: int) -> tuple[float, bytes]:
        _sync(dev)
        t0 = time.perf_counter()
        out = generate(model, prompt, n, sampling["temperature"], sampling["topK"], sampling["seed"], use_cache)
        _sync(dev)  # each token's logits come back to the host anyway; this makes the end explicit
        return time.perf_counter() - t0, out

    try:
        timed(True, WARMUP_TOKENS)
        timed(False, WARMUP_TOKENS)
        (kv_s, kv), (rec_s, rec) = timed(True, new_tokens), timed(False, new_tokens)
        where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else threads_label(torch.get_num_threads())
    finally:
        torch.set_num_threads(threads_before)
    return {"kv_seconds": kv_s, "kv_tokens": kv, "recompute_seconds": rec_s, "recompute_tokens": rec, "where": where}


def rounds_in_turn(kv: Callable[[], tuple[float, bytes]], recompute: Callable[[], tuple[float, bytes]],
                   rounds: dict = ROUNDS) -> tuple[tuple[float, bytes], tuple[float, bytes]]:
    """(median seconds, tokens) of each mode, timed in turn for `rounds` (ROUNDS' keys); every round must give
    the same tokens."""
    runs: dict[str, list[tuple[float, bytes]]] = {"kv": [], "recompute": []}
    while len(runs["kv"]) < rounds["min"] or (len(runs["kv"]) < rounds["max"]
                                             and sum(s for s, _ in runs["kv"]) < rounds["seconds"]):
        runs["kv"].append(kv())
        runs["recompute"].append(recompute())
    for mode, timings in runs.items():
        if any(tokens != timings[0][1] for _, tokens in timings):
            raise RuntimeError(f"the {mode} decoder gave different tokens in two rounds")
    return ((statistics.median(s for s, _ in runs["kv"]), runs["kv"][0][1]),
            (statistics.median(s for s, _ in runs["recompute"]), runs["recompute"][0][1]))


def run_native(threads: int | None, preset: str, new_tokens: int, prompt: bytes, sampling: dict,
               rounds: dict = ROUNDS) -> dict:
    from scripts.api_ctypes import Binding  # the checkout's binding, generated from the C header

    binding = Binding(build_dir() / "native/libtinygpt.so")
    lib = binding.lib

    def check(code: int) -> int:
        if code < 0:
            raise RuntimeError(f"native: {lib.tg_last_error().decode()} (code {code})")
        return code

    tg_config = binding.struct("tg_config", model_config(preset).to_json() | {"initStd": init_std()})
    # one row: generation runs batch 1, and the arena's training activations grow with the batch
    handle = lib.tg_create(ctypes.byref(tg_config), 1, threads or os.cpu_count() or 1)
    if not handle:
        raise RuntimeError(f"native: {lib.tg_last_error().decode()}")
    try:
        check(lib.tg_init(handle, train_config(preset).seed))
        tokens = np.frombuffer(prompt, dtype=np.uint8).astype(np.int32)
        out = np.zeros(max(new_tokens, WARMUP_TOKENS), np.int32)

        def timed(use_cache: bool, n: int) -> tuple[float, bytes]:
            t0 = time.perf_counter()
            made = check(lib.tg_generate(handle, tokens.ctypes.data_as(ctypes.c_void_p), tokens.size, n,
                                         sampling["temperature"], sampling["topK"], sampling["seed"], int(use_cache),
                                         out.ctypes.data_as(ctypes.c_void_p)))
            return time.perf_counter() - t0, bytes(out[:made].astype(np.uint8))

        timed(True, WARMUP_TOKENS)
        timed(False, WARMUP_TOKENS)
        kv, rec = rounds_in_turn(lambda: timed(True, new_tokens), lambda: timed(False, new_tokens), rounds)
        return {"kv_seconds": kv[0], "kv_tokens": kv[1], "recompute_seconds": rec[0], "recompute_tokens": rec[1],
                "where": threads_label(lib.tg_n_threads(handle))}
    finally:
        lib.tg_destroy(handle)


def decode_job(new_tokens: int, prompt: bytes, sampling: dict, rounds: dict | None = None) -> dict:
    """What a JavaScript decode bench is asked (bench/webgpu/time_decode.js, bench/wasm/decode_node.mjs), less
    the preset and the engine's own keys; rounds: ROUNDS unless given."""
    return {"newTokens": new_tokens, "prompt": list(prompt), "temperature": sampling["temperature"],
            "topK": sampling["topK"], "seed": sampling["seed"], "warmupTokens": WARMUP_TOKENS,
            "rounds": ROUNDS if rounds is None else rounds}


def run_node_script(script: str, flags: tuple[str, ...], extra: dict, preset: str, new_tokens: int, prompt: bytes,
                    sampling: dict) -> dict:
    job = {"preset": preset, **decode_job(new_tokens, prompt, sampling), **extra}
    r = node_json(CHECKOUT / script, job, flags)
    return {**js_run(r), "where": (f"{r['build']} build, {threads_label(r['threads'])}" if "build" in r
                                   else r["adapter"] + (" (software)" if r["software"] else ""))}


@functools.lru_cache(maxsize=1)
def browser_bench():
    """bench/webgpu/browser_bench.py of the checkout, as a module (a script, not in a package)."""
    spec = importlib.util.spec_from_file_location("browser_bench", CHECKOUT / "bench/webgpu/browser_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_in_page(extra: dict, preset: str, new_tokens: int, prompt: bytes, sampling: dict) -> dict:
    """wgsl-chromium: both decoders in the page's module worker of headless Chromium (browser_bench.py)."""
    from .js_backends import adapter_name, chromium_args, is_software_adapter

    job = {**decode_job(new_tokens, prompt, sampling, extra["rounds"]), "variants": extra["variants"]}
    result = browser_bench().decode_in_page(shutil.which("chromium"), preset, job, chromium_args())
    software = is_software_adapter(result["adapter"])
    if software and not extra["allowSoftware"]:  # the adapter probed first, unless the driver changed
        raise RuntimeError(f"ran on a software adapter ({adapter_name(result['adapter'])}): no speed figure")
    (r,) = result["decode"]
    return {**js_run(r), "where": f"{result['browser']}, {adapter_name(result['adapter'])}" + " (software)" * software}


def js_run(r: dict) -> dict:
    """A JavaScript decode bench's {kv, recompute: {ms, tokens}} as a run (seconds, token bytes)."""
    run = {"kv_seconds": r["kv"]["ms"] / 1e3, "kv_tokens": bytes(r["kv"]["tokens"]),
           "recompute_seconds": r["recompute"]["ms"] / 1e3, "recompute_tokens": bytes(r["recompute"]["tokens"])}
    if r.get("variants"):  # the KV cache's variants timed in the same rounds (time_decode.js DECODE_VARIANTS)
        run["variants"] = {name: {"seconds": v["ms"] / 1e3, "tokens": bytes(v["tokens"])}
                           for name, v in r["variants"].items()}
    return run


def decode_figures(new_tokens: int, run: dict) -> dict:
    """A run's figures: each mode's tokens/s, their ratio, whether the modes agreed, and the digest of the
    tokens (equal digests across engines: the same text, so the same work)."""
    kv_rate, rec_rate = new_tokens / run["kv_seconds"], new_tokens / run["recompute_seconds"]
    figures = {"kv_tokens_per_s": kv_rate, "recompute_tokens_per_s": rec_rate, "speedup": kv_rate / rec_rate,
               "same_tokens": run["kv_tokens"] == run["recompute_tokens"],
               "tokens_sha256": hashlib.sha256(run["kv_tokens"]).hexdigest()[:16],
               "kv_seconds": run["kv_seconds"], "recompute_seconds": run["recompute_seconds"]}
    if "variants" in run:  # each variant's tokens/s, the default's over it, and the same tokens from all
        figures["variants"] = {name: {"kv_tokens_per_s": new_tokens / v["seconds"],
                                      "default_over_variant": kv_rate / (new_tokens / v["seconds"])}
                               for name, v in run["variants"].items()}
        figures["same_tokens"] &= all(v["tokens"] == run["kv_tokens"] for v in run["variants"].values())
    return figures


def variant_names(text: str) -> tuple[str, ...]:
    """A command line's comma-separated names of time_decode.js's DECODE_VARIANTS ("" for none)."""
    return tuple(filter(None, text.split(",")))


def decode_bench(engine: str, preset: str, new_tokens: int = 512, prompt: bytes = b"\n", seed: int = 0,
                 threads: int | None = None, allow_software_gpu: bool = False, variants: tuple[str, ...] = (),
                 rounds: dict | None = None) -> dict:
    """KV-cache and full-recompute decode of `new_tokens` tokens on one engine (see the module's doc).

    threads: the CPU engines' thread count (pytorch-cpu, native, wasm-node); None = each one's own
    default (torch's setting; every core for native and WebAssembly, as the page does).
    Raises RuntimeError saying why when the engine is not available here. allow_software_gpu lets
    the WGSL engines run on a software adapter: for checking the tokens, never for a speed figure. variants:
    the WGSL engines also time these of time_decode.js's DECODE_VARIANTS (e.g. notAhead), in the same rounds.
    rounds: {min, max, seconds} of the engines that take rounds (ROUNDS unless given; a software adapter's
    token check takes one: its rounds time nothing).
    """
    reason = unavailable_reason(engine, allow_software_gpu)
    if reason is not None:
        raise RuntimeError(f"{engine} is not available: {reason}")
    defaults = sampling_defaults()
    sampling = {"temperature": defaults["temperature"], "topK": defaults["topK"], "seed": seed}
    check_sampling_args(prompt, new_tokens, sampling["temperature"], sampling["topK"], seed)
    if new_tokens < 1:
        raise ValueError(f"decode_bench needs at least one new token, got {new_tokens}")
    rounds = ROUNDS if rounds is None else {**ROUNDS, **rounds}
    if not 1 <= rounds["min"] <= rounds["max"]:
        raise ValueError(f"decode_bench's rounds: 1 <= min <= max, got {rounds}")
    config = model_config(preset)
    args = (preset, new_tokens, prompt, sampling)
    if engine.startswith("pytorch-"):
        run = run_pytorch(engine.removeprefix("pytorch-"), threads, *args)
    elif engine == "native":
        run = run_native(threads, *args, rounds)
    elif engine == "wasm-node":
        run = run_node_script("bench/wasm/decode_node.mjs", wasm_node_flags(),
                              {"wasmDir": str(build_dir() / "wasm"), "threads": threads, "rounds": rounds}, *args)
    else:
        extra = {"allowSoftware": allow_software_gpu, "variants": list(variants), "rounds": rounds}
        run = (run_in_page(extra, *args) if engine == "wgsl-chromium"
               else run_node_script("bench/webgpu/decode_bench.mjs", (), extra, *args))
    return {
        "engine": engine, "preset": preset, "new_tokens": new_tokens, "ctx": config.ctx,
        "params": config.param_count(), **decode_figures(new_tokens, run), "where": run["where"],
        "prompt": prompt.decode("latin-1"), "temperature": sampling["temperature"], "top_k": sampling["topK"],
        "seed": seed, "weights": f"untrained: the preset's seeded initial weights (seed {train_config(preset).seed})",
    }


# ---- the command line ------------------------------------------------------------------------------------

def cpu_model() -> str:
    if CHECKOUT is None:
        return platform.processor() or "unknown CPU"
    from bench.cpu.native import cpu_model as lscpu_model  # lscpu's "Model name"

    return lscpu_model()


def markdown_table(results: list[dict]) -> str:
    rows = ["| engine | preset | ctx | KV tokens/s | recompute tokens/s | KV ÷ recompute | same tokens | tokens sha256 "
            "| on |", "|---|---|---:|---:|---:|---:|---|---|---|"]
    for r in results:
        same = "yes" if r["same_tokens"] else "NO"
        rows.append(f"| {r['engine']} | {r['preset']} | {r['ctx']} | {r['kv_tokens_per_s']:,.0f} | "
                    f"{r['recompute_tokens_per_s']:,.0f} | {r['speedup']:.1f}x | {same} | {r['tokens_sha256']} | "
                    f"{r['where']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default=None, help=f"comma-separated, of {', '.join(ENGINES)} "
                    "(default: every one available here)")
    ap.add_argument("--presets", default=DEFAULT_PRESETS)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--prompt", default="\n", help="the prompt, as UTF-8 text (default: one newline)")
    ap.add_argument("--seed", type=int, default=0, help="the sample stream's seed")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of pytorch-cpu, native and wasm-node (default: torch's setting; every core)")
    ap.add_argument("--wgsl-variants", type=variant_names, default=(),
                    help="the WGSL engines also time these trainers of time_decode.js's DECODE_VARIANTS, "
                    "comma-separated (notAhead, oneWorkgroup, chain): an A/B in the same rounds")
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    args = ap.parse_args(argv)
    engines = args.engines.split(",") if args.engines else available_decode_engines()
    for engine in engines:  # refuse before measuring anything
        reason = unavailable_reason(engine)
        if reason is not None:
            ap.error(f"{engine} is not available: {reason}")
    results = []
    for preset in args.presets.split(","):
        for engine in engines:
            results.append(decode_bench(engine, preset, args.new_tokens, args.prompt.encode(), args.seed, args.threads,
                                        variants=args.wgsl_variants))
            r = results[-1]
            behind = "".join(f", {name} {v['kv_tokens_per_s']:,.0f} tokens/s"
                             for name, v in r.get("variants", {}).items())
            print(f"{engine} {preset}: KV {r['kv_tokens_per_s']:,.0f} tokens/s, recompute "
                  f"{r['recompute_tokens_per_s']:,.0f} tokens/s, {r['speedup']:.1f}x{behind}",
                  file=sys.stderr, flush=True)
    sampling = sampling_defaults()
    print(f"Decode of {args.new_tokens} new tokens after {args.prompt!r} (temperature {sampling['temperature']}, "
          f"top-k {sampling['topK']}, seed {args.seed}), untrained weights (each preset's seeded init):\n")
    print(markdown_table(results))
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(["python -m bench.decode", *sys.argv[1:]]),
                                              "cpu": cpu_model(), "cpu_count": os.cpu_count(),
                                              "torch": torch.__version__, "results": results}, indent=1) + "\n")
    return 0 if all(r["same_tokens"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
