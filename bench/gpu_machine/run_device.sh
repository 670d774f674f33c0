#!/bin/bash
# On the GPU machine (no internet, no Node): unpack what was carried, then run both benchmarks on
# the same GPU and leave the JSON in $OUT. Carried, from the repo root (folders in .git/info/exclude):
#   .gl/        Debian's Vulkan loader debs (the device README's recipe)
#   .wgcarry/   node.xz (this machine's Node 20), webgpu/ (npm `webgpu`: index.js, package.json,
#               dist/linux-x64/dawn.node.xz)   -- made by bench/gpu_machine/pack_carry.sh
#   .chrcarry/  for CHROMIUM=1 only: Debian's headless Chromium in two halves, carried by two calls
#               before this one  -- made by bench/gpu_machine/pack_chromium.sh
set -euo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$NV_ICD" ] && export VK_DRIVER_FILES=$NV_ICD
unxz() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
mkdir -p /tmp/wg/bin
unxz .wgcarry/node.xz /tmp/wg/bin/node && chmod +x /tmp/wg/bin/node
rm -rf webgpu/node_modules && mkdir -p webgpu/node_modules/webgpu/dist/linux-x64
cp .wgcarry/webgpu/index.js .wgcarry/webgpu/package.json webgpu/node_modules/webgpu/
unxz .wgcarry/webgpu/dist/linux-x64/dawn.node.xz webgpu/node_modules/webgpu/dist/linux-x64/dawn.node
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
PRESETS=${PRESETS:-small,medium,large,xl,huge,massive}
# BLOCKS=N: both benches time their STEPS in N blocks and report the median block beside the mean;
# PAGE_LOOP=S: the WGSL benches then time BLOCKS rounds of S steps in the page's own loop (time_trainer.js)
# Dawn prints each shader compiler warning with its source line and a caret: keep only the rest
without_warnings() { grep -v "^Warning\|warning\|^ *\^\|^ *$"; }
# BENCH_ALL=1: instead of the rest, every curve of this GPU in one `tinygpt bench --all` (bench/all.py):
# PyTorch CUDA's three modes and WGSL under Node, and with CHROMIUM=1 WGSL in the page's worker and in the page's own
# loop, with their decode; BENCH_ALL_ARGS adds options. Then matmul at MATMUL_SIZES against cuBLAS, and parity with
# python_ref at PARITY_PRESETS. $OUT/NAME.json, and its PNGs where matplotlib is installed (the lent H200 has it;
# elsewhere `tinygpt bench --plot` draws them from the JSON)
if [ -n "${BENCH_ALL:-}" ]; then
  if [ -n "${CHROMIUM:-}" ]; then
    ln -sfn "$(bash bench/gpu_machine/unpack_chromium.sh)" /tmp/wg/bin/chromium
    export TINYGPT_CHROMIUM_ARGS=${CHROMIUM_FLAGS---use-angle=vulkan}
  fi
  export PATH=/tmp/wg/bin:$PATH PYTHONUNBUFFERED=1
  # shellcheck disable=SC2086  # BENCH_ALL_ARGS: options, a word each
  python3 -m bench.cli --all --backends "${BENCH_ALL_BACKENDS:-pytorch-cuda-*,wgsl-*}" --out "$OUT" \
    --name "${BENCH_ALL_NAME:-bench}" ${BENCH_ALL_ARGS:-} 2> >(tee "$OUT/bench_all.log" >&2) || echo "bench --all failed: exit $?"
  sizes=${MATMUL_SIZES:-4096}
  node bench/webgpu/bench.mjs --presets tiny --steps 5 --sizes "$sizes" --out "$OUT/matmul_wgsl.json" \
    2> >(without_warnings >&2) || echo "WGSL matmul failed: exit $?"
  python3 bench/gpu_machine/torch_bench.py --presets tiny --steps 5 --modes eager --sizes "$sizes" > "$OUT/matmul_cublas.json" \
    || echo "cuBLAS matmul failed: exit $?"
  python3 bench/webgpu/parity.py --presets "${PARITY_PRESETS:-tiny,small,medium,large,xl,huge,massive}" \
    --steps "${PARITY_STEPS:-50}" --node /tmp/wg/bin/node --out "$OUT/parity.json" || echo "parity failed: exit $?"
  exit 0
fi
# PROFILE=1 adds each preset's host encode/submit cost and per-kernel GPU times; SKIP_TORCH=1 skips PyTorch,
# TORCH_MODES picks its modes (bench/torch_cuda.py MODES). The tile and attention-layout experiments that
# set chooseTile and ATTENTION_LAYOUTS are in git history (docs/lab/README.md names them).
# the WGSL bench of the code in DIR into $OUT/NAME.json: wgsl_bench DIR NAME [more bench.mjs options]
wgsl_bench() {
  local dir=$1 name=$2
  shift 2
  /tmp/wg/bin/node "$dir/bench/webgpu/bench.mjs" --presets "$PRESETS" --steps "${STEPS:-30}" --warmup 5 \
    --blocks "${BLOCKS:-1}" --sizes "${SIZES-1024,2048,4096}" ${PAGE_LOOP:+--page-loop "$PAGE_LOOP"} --out "$OUT/$name.json" "$@"
}
# each side runs even if the other fails, so one run always brings back what can be measured
# LORA=default (or RANK,ALPHA,TARGET+TARGET): each preset's LoRA fine-tune step after its full step (bench.mjs --lora)
wgsl_bench . webgpu_bench ${PROFILE:+--profile 1} ${LORA:+--lora "$LORA"} 2> >(tee "$OUT/webgpu_bench.log" >&2) || echo "WebGPU bench failed: exit $?"
# CHROMIUM=1: the same presets in headless Chromium's WebGPU (browser_bench.py), then under Node again
# (A/B/A against drift). Debian's headless Chromium and its libraries were staged by two earlier calls
# of the same held machine (pack_chromium.sh, unpack_chromium.sh). CHROMIUM_FLAGS are more browser flags:
# by default ANGLE on Vulkan, without which the GPU process of this display-less machine fails to start and
# WebGPU offers no adapter ("Failed to create WebGPU Context Provider"); on SwiftShader that flag hangs instead
if [ -n "${CHROMIUM:-}" ]; then
  flags=()
  for f in ${CHROMIUM_FLAGS---use-angle=vulkan}; do flags+=("--browser-arg=$f"); done
  # CHROMIUM_DECODE=presets: also decoding at those presets, in the page and under Node (decode_bench.py) before and after;
  # DECODE_VARIANTS=names: each also with those trainers of time_decode.js's DECODE_VARIANTS (notAhead, oneWorkgroup,
  # chain), in the same rounds
  node_decode() {
    PATH=/tmp/wg/bin:$PATH python3 -m bench.decode --engines wgsl-node --presets "$CHROMIUM_DECODE" --out "$OUT/$1.json" \
      ${DECODE_VARIANTS:+--wgsl-variants "$DECODE_VARIANTS"} > "$OUT/$1.log" 2>&1 || echo "Node decode bench failed: exit $?"
  }
  [ -z "${CHROMIUM_DECODE:-}" ] || node_decode decode_node
  chromium=$(bash bench/gpu_machine/unpack_chromium.sh) && python3 bench/webgpu/browser_bench.py --chromium "$chromium" \
    --presets "$PRESETS" --steps "${STEPS:-30}" --warmup 5 --blocks "${BLOCKS:-1}" ${PAGE_LOOP:+--page-loop "$PAGE_LOOP"} ${CHROMIUM_DECODE:+--decode-presets "$CHROMIUM_DECODE"} \
    ${DECODE_VARIANTS:+--decode-variants "$DECODE_VARIANTS"} "${flags[@]}" --out "$OUT/browser_bench.json" 2> >(tee "$OUT/browser_bench.log" >&2) || echo "browser bench failed: exit $?"
  wgsl_bench . webgpu_bench_again 2> >(tee "$OUT/webgpu_bench_again.log" >&2) || echo "WebGPU bench (again) failed: exit $?"
  [ -z "${CHROMIUM_DECODE:-}" ] || node_decode decode_node_again
fi
# DISPATCHES=1: each dispatch's GPU time in place, inside running steps (dispatch_timeline.mjs)
[ -z "${DISPATCHES:-}" ] || /tmp/wg/bin/node bench/webgpu/dispatch_timeline.mjs "${DISPATCH_PRESETS-$PRESETS}" "$OUT/dispatch_timeline.json" 20 20 \
  2> >(without_warnings >&2) || echo "dispatch timeline failed: exit $?"
# DECODE_DISPATCHES=1: the same for a decoded token's dispatches, at the window's last position
[ -z "${DECODE_DISPATCHES:-}" ] || /tmp/wg/bin/node bench/webgpu/dispatch_timeline.mjs "${DISPATCH_PRESETS-$PRESETS}" "$OUT/decode_timeline.json" 20 20 \
  --decode 2> >(without_warnings >&2) || echo "decode timeline failed: exit $?"
# BASELINE=DIR (a carried copy of an earlier commit's webgpu/ and site/static/, and python_ref/ for DECODE_AB, e.g.
# from `git archive`): the same WGSL bench on that code, then this code again, in the same call (A/B/A against drift)
[ -z "${BASELINE:-}" ] || ln -sfn "$PWD/webgpu/node_modules" "$BASELINE/webgpu/node_modules"
side_dir() { if [ "$1" = baseline ]; then echo "$BASELINE"; else echo .; fi; }  # where a side of the A/B's code is
# with DECODE_AB=presets: decoding on both instead, this code then the baseline, twice (A/B/A/B): a decoded token's
# dispatches in place (dispatch_timeline.mjs --decode) and 512 tokens under Node (decode_bench.py, wgsl-node)
if [ -n "${BASELINE:-}" ] && [ -n "${DECODE_AB:-}" ]; then
  for round in 1 2; do
    for side in this baseline; do
      dir=$(side_dir $side)
      (cd "$dir" && /tmp/wg/bin/node bench/webgpu/dispatch_timeline.mjs "$DECODE_AB" "$OUT/decode_timeline_${side}_$round.json" 20 20 \
        --decode 2> >(without_warnings >&2)) | tee "$OUT/decode_timeline_${side}_$round.log" || echo "decode timeline ($side) failed: exit $?"
      (cd "$dir" && PATH=/tmp/wg/bin:$PATH python3 -m bench.decode --engines wgsl-node --presets "$DECODE_AB" \
        --out "$OUT/decode_${side}_$round.json" > "$OUT/decode_${side}_$round.log" 2>&1) || echo "decode bench ($side) failed: exit $?"
    done
  done
elif [ -n "${BASELINE:-}" ]; then
  for side in baseline again; do
    dir=$(side_dir $side)
    wgsl_bench "$dir" "webgpu_bench_$side" 2> >(tee "$OUT/webgpu_bench_$side.log" >&2) || echo "WebGPU bench ($side) failed: exit $?"
  done
fi
# SUBGROUPS_AB=1: this code without subgroups (TINYGPT_SUBGROUPS=0, the kernels' fallback), then with them
# again, after the bench above (A/B/A); with DISPATCHES=1, also the dispatch timeline without them
if [ -n "${SUBGROUPS_AB:-}" ]; then
  TINYGPT_SUBGROUPS=0 wgsl_bench . webgpu_bench_nosubgroups 2> >(tee "$OUT/webgpu_bench_nosubgroups.log" >&2) || echo "WebGPU bench (no subgroups) failed: exit $?"
  wgsl_bench . webgpu_bench_again 2> >(tee "$OUT/webgpu_bench_again.log" >&2) || echo "WebGPU bench (again) failed: exit $?"
  [ -z "${DISPATCHES:-}" ] || TINYGPT_SUBGROUPS=0 /tmp/wg/bin/node bench/webgpu/dispatch_timeline.mjs "${DISPATCH_PRESETS-$PRESETS}" \
    "$OUT/dispatch_timeline_nosubgroups.json" 20 20 2> >(without_warnings >&2) || echo "dispatch timeline (no subgroups) failed: exit $?"
fi
# DAWN_DIAG=toggles (e.g. disable_robustness): this code's bench once more with those Dawn toggles, a
# diagnostic of what they cost (browsers keep Dawn's defaults: never a product figure)
[ -z "${DAWN_DIAG:-}" ] || DAWN_FEATURES=$DAWN_DIAG wgsl_bench . webgpu_bench_dawn 2> >(without_warnings > "$OUT/webgpu_bench_dawn.log") \
  || echo "WebGPU bench (Dawn toggles) failed: exit $?"
# the WGSL trainer against python_ref (on CUDA) step by step on this GPU (parity.py), so that every
# speed measured here is of code that still trains as the reference does; PARITY=0 skips it
[ "${PARITY:-1}" = 0 ] || python3 bench/webgpu/parity.py --presets "${PARITY_PRESETS:-tiny,small,medium,large}" --steps "${PARITY_STEPS:-50}" \
  --node /tmp/wg/bin/node --out "$OUT/parity.json" || echo "parity failed: exit $?"
[ -n "${SKIP_TORCH:-}" ] || PYTHONUNBUFFERED=1 python3 bench/gpu_machine/torch_bench.py --presets "$PRESETS" --steps "${STEPS:-30}" --warmup 5 \
  --blocks "${BLOCKS:-1}" --modes "${TORCH_MODES:-eager,cudagraph}" > "$OUT/torch_bench.json" || echo "PyTorch bench failed: exit $?"
cat "$OUT/webgpu_bench.json" "$OUT/torch_bench.json"
