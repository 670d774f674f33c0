#!/bin/bash
# The WebAssembly builds in Node on a second machine (the lent GPU box's CPU), pinned to 2 of its
# cores, to compare the 2-thread scaling with the CPU box's. Not a replacement for the CPU box's
# table: a different CPU. It runs bench/wasm/builds.py itself (Node only, no native or PyTorch
# columns), with `node` on PATH being a wrapper that pins the carried Node with taskset.
# Carried from the repo root (ignored folders, listed in .git/info/exclude):
#   .wgcarry/node.xz   this machine's Node 20 (bench/gpu_machine/pack_carry.sh)
#   build/wasm/        the builds from `make build`
# Output: $OUT/wasm_device.txt (the bench's progress lines, table and JSON).
set -euo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/wb/bin
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
  .wgcarry/node.xz /tmp/wb/node
chmod +x /tmp/wb/node
printf '#!/bin/sh\nexec taskset -c %s /tmp/wb/node "$@"\n' "${CORES:-0,1}" > /tmp/wb/bin/node
chmod +x /tmp/wb/bin/node
PATH=/tmp/wb/bin:$PATH python3 bench/wasm/builds.py --no-browser --no-reference \
  --presets "${PRESETS:-small,medium,large,xl}" --configs "${CONFIGS:-simd:1,threads:1,threads:2,relaxed:1,relaxed:2}" \
  --rounds "${ROUNDS:-3}" | tee "$OUT/wasm_device.txt"
