#!/usr/bin/env bash
# Builds bench/cpu/matmul_selftest.cpp with Emscripten (scripts/em++.sh) in the flavours of the
# browser builds and runs each under Node: scalar, SIMD, relaxed-SIMD FMA, SIMD + threads. (Memory64
# is only compiled: Node 20 cannot run it.) Output goes to $TINYGPT_BUILD/wasm-selftest/ (or
# build/wasm-selftest/). Exit status 1 if any flavour fails. SKIP_MEMORY64=1 skips the Memory64
# compile (its first link builds the wasm64 system libraries: minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${TINYGPT_BUILD:-$PWD/build}/wasm-selftest"
mkdir -p "$OUT"
SRCS="bench/cpu/matmul_selftest.cpp wasm/src/matmul.cpp wasm/src/thread_pool.cpp"
COMMON="-O3 -std=c++17 -Wall -Wextra -Werror -Iwasm/src -sENVIRONMENT=node -sEXIT_RUNTIME=1"
status=0
run() {  # name, node flags, em++ flags...
    local name="$1" node_flags="$2"; shift 2
    echo "== $name: $*"
    scripts/em++.sh $COMMON "$@" $SRCS -o "$OUT/$name.js"
    node $node_flags "$OUT/$name.js" || status=1
}
run scalar ""
run simd "" -msimd128
run relaxed --experimental-wasm-relaxed-simd -msimd128 -mrelaxed-simd
run threads "" -msimd128 -pthread -sPTHREAD_POOL_SIZE=2
echo "== memory64 (compile only): -msimd128 -pthread -sMEMORY64=1"
[ "${SKIP_MEMORY64:-0}" = 1 ] || scripts/em++.sh $COMMON -Wno-experimental -msimd128 -pthread -sMEMORY64=1 -sPTHREAD_POOL_SIZE=2 $SRCS -o "$OUT/memory64.js"
exit $status
