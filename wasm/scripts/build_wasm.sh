#!/usr/bin/env bash
# Builds the C++ core (wasm/src/*.cpp) into four ES-module WebAssembly builds:
#   scalar    -O3, no SIMD                      (any WebAssembly engine)
#   simd      + -msimd128                       (wasm_simd128.h paths in the hot loops)
#   threads   + -pthread, pool from navigator.hardwareConcurrency / os.cpus()  (needs COOP/COEP)
#   memory64  + -sMEMORY64=1, up to 16 GB       (web/worker only: Node 20 cannot run it)
# Output: $BUILD/wasm/<variant>/{tinygpt.mjs,tinygpt.wasm,tinygpt_api.js}; each variant is then copied to
# site/static/wasm/<variant>/ (git-ignored) so any static server of site/static serves the page
# and its modules from one origin. tinygpt_api.js (generated from tinygpt_api.h) tells the JS wrapper which
# arguments are pointers, so worker code is the same for all four builds.
#
# Incremental: a variant is rebuilt only when the hash of its inputs (sources, headers, flags,
# compiler version, this script) changes; a warm run prints nothing and takes well under a second.
#
# usage: build_wasm.sh [--src DIR] [--api HEADER] [--out DIR] [--no-site-copy] [VARIANT...]
set -euo pipefail

HERE="$(cd "$(dirname "$(readlink -f "$0")")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
SRC="$REPO/wasm/src"
API=""
OUT="${TINYGPT_BUILD:-$REPO/build}/wasm"
SITE="$REPO/site/static/wasm"
VARIANTS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --src) SRC="$(readlink -f "$2")"; shift 2 ;;
        --api) API="$(readlink -f "$2")"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-site-copy) SITE=""; shift ;;
        scalar|simd|threads|memory64) VARIANTS+=("$1"); shift ;;
        *) echo "build_wasm.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(scalar simd threads memory64)
API="${API:-$SRC/tinygpt_api.h}"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd -P)"
EMCC="$HERE/em++.sh"

[ -f "$API" ] || { echo "build_wasm.sh: C API header $API not found (the C++ core provides it)" >&2; exit 1; }
mapfile -t SOURCES < <(find "$SRC" -maxdepth 1 -name '*.cpp' | sort)
[ ${#SOURCES[@]} -gt 0 ] || { echo "build_wasm.sh: no .cpp files in $SRC" >&2; exit 1; }

# Exports: every tg_ function of the C API, plus malloc/free for the buffers JS hands in.
signatures="$(python3 "$HERE/api_signatures.py" "$API")"
exports="$(printf '%s' "$signatures" | python3 -c '
import json, sys
names = sorted(json.load(sys.stdin)["functions"])
print(",".join(["_malloc", "_free"] + ["_" + n for n in names]))')"

COMMON=(-std=c++17 -O3 -Wall -fwasm-exceptions
    -sMODULARIZE -sEXPORT_ES6 -sEXPORT_NAME=createTinyGPTModule
    -sWASM_BIGINT                       # int64_t crosses into JS as BigInt, unsplit
    -sALLOW_MEMORY_GROWTH=1             # the C++ side allocates each model's arena once, at creation
    -sSTACK_SIZE=1MB
    -sEXPORTED_FUNCTIONS="$exports"
    -sEXPORTED_RUNTIME_METHODS=wasmMemory
    -sINCOMING_MODULE_JS_API=locateFile,print,printErr,wasmMemory,tgThreads)
# The pthread pool is created before main runs, sized to the cores the page can use (or the
# tgThreads module option); the C++ pool takes its workers from it. STRICT=2: asking for more
# threads than the pool has fails with an error instead of deadlocking in a worker.
POOL='(Module["tgThreads"]||(typeof navigator<"u"&&navigator.hardwareConcurrency)||require("os").cpus().length)'
THREADS=(-pthread -sPTHREAD_POOL_SIZE="$POOL" -sPTHREAD_POOL_SIZE_STRICT=2)

variant_flags() {  # sets VFLAGS for variant $1 (an array: the pool expression holds spaces)
    case "$1" in
        scalar)   VFLAGS=(-sENVIRONMENT=web,worker,node -sMAXIMUM_MEMORY=4GB) ;;
        simd)     VFLAGS=(-sENVIRONMENT=web,worker,node -sMAXIMUM_MEMORY=4GB -msimd128) ;;
        threads)  VFLAGS=(-sENVIRONMENT=web,worker,node -sMAXIMUM_MEMORY=4GB -msimd128 "${THREADS[@]}") ;;
        memory64) VFLAGS=(-sENVIRONMENT=web,worker -sMEMORY64=1 -sMAXIMUM_MEMORY=16GB -msimd128 "${THREADS[@]}") ;;
    esac
}

inputs_hash() {  # inputs_hash VARIANT
    {
        variant_flags "$1"; printf '%s\n' "${COMMON[@]}" "${VFLAGS[@]}"
        cat "$HERE/build_wasm.sh" "$HERE/api_signatures.py"
        find "$SRC" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.h' \) -print0 | sort -z | xargs -0 cat
        cat "$API"
        cat "${TINYGPT_CACHE:-$HOME/.cache/tinygpt}/emsdk-trixie/.tinygpt-emscripten-ready" 2>/dev/null || command -v emcc
    } | sha256sum | cut -c1-32
}

# Chromium >= 137 names the Memory64 descriptor field `address`; Emscripten 3.1.69 writes the
# older `index: "i64"`, and with it memory beyond 4 GiB silently fails to be created. Rewrite
# every occurrence, and fail the build if the old key is still there afterwards.
fix_memory64_descriptor() {
    local glue="$1"
    sed -i -E 's/\bindex: *"i64"/address:"i64"/g; s/"index": *"i64"/"address":"i64"/g' "$glue"
    if grep -qE '(\bindex|"index"): *"i64"' "$glue"; then
        echo "build_wasm.sh: $glue still has an index:\"i64\" descriptor" >&2; return 1
    fi
    grep -q 'address:"i64"' "$glue" || {
        echo "build_wasm.sh: no Memory64 descriptor found in $glue (Emscripten changed?)" >&2; return 1; }
}

build_variant() {
    local v="$1" dir="$OUT/$1" hash
    hash="$(inputs_hash "$v")"
    if [ "$(cat "$dir/.inputs" 2>/dev/null)" = "$hash" ] && [ -f "$dir/tinygpt.mjs" ]; then
        return 0
    fi
    echo "[build_wasm] $v" >&2
    local t0=$SECONDS tmp="$dir.tmp"
    rm -rf "$tmp"; mkdir -p "$tmp"
    variant_flags "$v"
    (cd "$REPO" && "$EMCC" "${COMMON[@]}" "${VFLAGS[@]}" -I"$SRC" "${SOURCES[@]}" -o "$tmp/tinygpt.mjs") \
        >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; echo "[build_wasm] $v FAILED" >&2; return 1; }
    if [ "$v" = memory64 ]; then fix_memory64_descriptor "$tmp/tinygpt.mjs"; fi
    printf "export default %s;\n" "$signatures" >"$tmp/tinygpt_api.js"
    printf '%s\n' "$hash" >"$tmp/.inputs"
    rm -rf "$dir"; mv "$tmp" "$dir"
    echo "[build_wasm] $v done in $((SECONDS - t0)) s" >&2
}

# Variants build in parallel, at most one per core: each is a single emcc process. Each writes
# its exit status to a file, so no status is lost however the jobs interleave.
status_dir="$(mktemp -d)"; trap 'rm -rf "$status_dir"' EXIT
for v in "${VARIANTS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.2; done
    (build_variant "$v"; echo $? >"$status_dir/$v") &
done
wait
for v in "${VARIANTS[@]}"; do
    [ "$(cat "$status_dir/$v" 2>/dev/null)" = 0 ] || exit 1
done

if [ -n "$SITE" ]; then
    for v in "${VARIANTS[@]}"; do
        mkdir -p "$SITE/$v"
        for f in tinygpt.mjs tinygpt.wasm tinygpt_api.js; do
            cmp -s "$OUT/$v/$f" "$SITE/$v/$f" || cp "$OUT/$v/$f" "$SITE/$v/$f"
        done
    done
fi
