#!/bin/bash
# The WebAssembly threads and relaxed builds in Node on a second, quieter machine (the lent GPU box's
# CPU), pinned to 2 cores with taskset, to tell what the 2-thread scaling is on 2 cores that are not
# shared with other guests. Not a replacement for the CPU box's table (wasm/scripts/bench_wasm.py):
# a different CPU. Carried from the repo root (ignored folders, listed in .git/info/exclude):
#   .wgcarry/node.xz   this machine's Node 20 (webgpu/bench/pack_carry.sh)
#   build/wasm/        the builds from `make build` (threads, relaxed, simd)
# Rounds are round-robin over presets and builds; each measurement is the median of the steps after
# the first, as in bench_wasm.py. Output: $OUT/wasm_device.json and a line per measurement.
set -euo pipefail
OUT=${OUT:-/tmp/out}
CORES=${CORES:-0,1}
ROUNDS=${ROUNDS:-3}
PRESETS=${PRESETS:-small,medium,large,xl}
CONFIGS=${CONFIGS:-simd:1,threads:1,threads:2,relaxed:1,relaxed:2}
mkdir -p "$OUT" /tmp/wb/bin
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
  .wgcarry/node.xz /tmp/wb/bin/node
chmod +x /tmp/wb/bin/node
lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core" | tee "$OUT/cpu.txt"
python3 - "$OUT" "$CORES" "$ROUNDS" "$PRESETS" "$CONFIGS" <<'EOF'
import json, statistics, subprocess, sys
out, cores, rounds, presets, configs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(","), sys.argv[5].split(",")
p = json.load(open("site/static/presets.json"))
steps = {"tiny": 12, "small": 8, "medium": 5, "large": 4, "xl": 4}
results = []
for r in range(rounds):
    for preset in presets:
        for item in configs:
            build, threads = item.split(":")
            cfg = {k: p["presets"][preset][k] for k in ("nLayer", "nHead", "dModel", "ctx", "batch")}
            cfg.update(vocabSize=p["model"]["vocabSize"], layerNormEps=p["model"]["layerNormEps"], initStd=p["model"]["initStd"])
            spec = {"config": cfg, "training": p["training"], "build": build, "threads": int(threads),
                    "initSeed": p["training"]["seed"], "corpus": None, "mode": "fixed-batch",
                    "steps": steps[preset], "wasmDir": "build/wasm"}
            json.dump(spec, open("/tmp/wb/spec.json", "w"))
            flags = ["--experimental-wasm-relaxed-simd"] if build == "relaxed" else []
            # os.cpus() (the pool size) reports every core; tgThreads comes from spec.threads
            proc = subprocess.run(["taskset", "-c", cores, "/tmp/wb/bin/node", *flags, "tests/wasm/node_driver.mjs",
                                   "/tmp/wb/spec.json"], capture_output=True, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            res = json.loads(lines[-1]) if lines else {"error": proc.stderr[-500:]}
            if "error" in res:
                print(f"{preset} {build} {threads}T failed: {res['error'][:300]}", flush=True)
                continue
            ms = statistics.median(res["stepMs"][1:])
            results.append({"round": r, "preset": preset, "build": build, "threads": int(threads), "ms": ms})
            print(f"round {r} {preset:7s} {build:8s} {threads}T {ms:9.1f} ms/step", flush=True)
json.dump(results, open(f"{out}/wasm_device.json", "w"))
EOF
