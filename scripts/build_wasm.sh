#!/usr/bin/env bash
# Builds the C++ core (wasm/src/*.cpp) into the ES-module WebAssembly builds that wasm/builds.json
# lists (scalar, simd, threads, relaxed, memory64), each -O3 with its compile flags, environment,
# maximum memory and, when it needs threads, a pthread pool.
# Output: $BUILD/wasm/<variant>/{tinygpt.mjs,tinygpt.wasm,tinygpt_api.js} and $BUILD/wasm/builds.js (the
# list as a module, for the loader); each is then copied to site/static/wasm/ (git-ignored) so any static
# server of site/static serves the page and its modules from one origin. tinygpt_api.js (generated from
# tinygpt_api.h) tells the JS wrapper which arguments are pointers and how the structs are laid out, so
# worker code is the same for every build. The config rules of site/static/presets.json reach the core
# as $BUILD/wasm/include/config_rules_generated.h (scripts/config_rules_header.py), written before anything compiles.
#
# Incremental: an object is recompiled only when the hash of its inputs (its source, all headers,
# flags, compiler) changes, a variant relinked only when an object or the link flags change; a warm
# run prints nothing and takes well under a second.
#
# usage: build_wasm.sh [--src DIR] [--api HEADER] [--out DIR] [--no-site-copy] [VARIANT...]
set -euo pipefail

HERE="$(cd "$(dirname "$(readlink -f "$0")")" && pwd -P)"
REPO="$(cd "$HERE/.." && pwd -P)"
SRC="$REPO/wasm/src"
API=""
OUT="${TINYGPT_BUILD:-$REPO/build}/wasm"
SITE="$REPO/site/static/wasm"
BUILDS_JSON="$REPO/wasm/builds.json"
# One line per build, fields split by "|" (a tab would collapse around the scalar build's empty flags):
# name, compile flags, environment, maximum memory (GiB), thread pool (1/0).
mapfile -t BUILD_LINES < <(python3 - "$BUILDS_JSON" <<'EOF'
import json, sys
for b in json.load(open(sys.argv[1]))["builds"]:
    print("|".join([b["name"], " ".join(b["compileFlags"]), b["environment"], str(b["memoryGiB"]),
                     "1" if b["needs"]["threads"] else "0"]))
EOF
)
ALL_VARIANTS=()
for line in "${BUILD_LINES[@]}"; do ALL_VARIANTS+=("${line%%|*}"); done
is_variant() { local v; for v in "${ALL_VARIANTS[@]}"; do [ "$v" = "$1" ] && return 0; done; return 1; }
VARIANTS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --src) SRC="$(readlink -f "$2")"; shift 2 ;;
        --api) API="$(readlink -f "$2")"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-site-copy) SITE=""; shift ;;
        *) is_variant "$1" || { echo "build_wasm.sh: unknown argument '$1' (builds: ${ALL_VARIANTS[*]})" >&2; exit 2; }
           VARIANTS+=("$1"); shift ;;
    esac
done
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=("${ALL_VARIANTS[@]}")
API="${API:-$SRC/tinygpt_api.h}"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd -P)"
EMCC="$HERE/em++.sh"
# presets.json's rules as a C++ header (rewritten only when its text changes).
RULES_DIR="$OUT/include"
python3 "$HERE/config_rules_header.py" "$REPO/site/static/presets.json" "$RULES_DIR/config_rules_generated.h"

[ -f "$API" ] || { echo "build_wasm.sh: C API header $API not found (the C++ core provides it)" >&2; exit 1; }
mapfile -t SOURCES < <(find "$SRC" -maxdepth 1 -name '*.cpp' | sort)
[ ${#SOURCES[@]} -gt 0 ] || { echo "build_wasm.sh: no .cpp files in $SRC" >&2; exit 1; }

# Fast path for a warm tree: one hash over everything that can change an output (sources,
# headers, API header, these scripts, the toolchain, the variants asked for). Equal to the last
# successful run's and every output present: nothing to do.
all_inputs_hash() {
    { printf '%s\n' "${VARIANTS[@]}" "$SRC" "$API" "$SITE"
      cat "$HERE/build_wasm.sh" "$HERE/api_signatures.py" "$API" "$BUILDS_JSON"
      cat "${TINYGPT_CACHE:-$HOME/.cache/tinygpt}/emsdk-trixie/.tinygpt-emscripten-ready" 2>/dev/null || command -v emcc || true
      find "$SRC" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.h' \) -print0 | sort -z | xargs -0 cat
      cat "$RULES_DIR/config_rules_generated.h"
    } | sha256sum | cut -c1-32
}
outputs_present() {
    local v f
    [ -f "$OUT/builds.js" ] || return 1
    [ -z "$SITE" ] || cmp -s "$OUT/builds.js" "$SITE/builds.js" || return 1
    for v in "${VARIANTS[@]}"; do
        for f in tinygpt.mjs tinygpt.wasm tinygpt_api.js; do
            [ -f "$OUT/$v/$f" ] || return 1
            [ -z "$SITE" ] || cmp -s "$OUT/$v/$f" "$SITE/$v/$f" || return 1
        done
    done
}
ALL_INPUTS="$(all_inputs_hash)"
[ "$(cat "$OUT/.all-inputs" 2>/dev/null)" = "$ALL_INPUTS" ] && outputs_present && exit 0
rm -f "$OUT/.all-inputs"

# Exports: every tg_ function of the C API, plus malloc/free for the buffers JS hands in.
signatures="$(python3 "$HERE/api_signatures.py" "$API")"
exports="$(printf '%s' "$signatures" | python3 -c '
import json, sys
names = sorted(json.load(sys.stdin)["functions"])
print(",".join(["_malloc", "_free"] + ["_" + n for n in names]))')"

# Compile flags (per object) and link flags (per variant).
CFLAGS=(-std=c++17 -O3 -Wall -fwasm-exceptions)
LDFLAGS=(-O3 -fwasm-exceptions
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
THREADS_LD=(-sPTHREAD_POOL_SIZE="$POOL" -sPTHREAD_POOL_SIZE_STRICT=2)

variant_flags() {  # sets VCFLAGS / VLDFLAGS for variant $1 (arrays: the pool expression holds spaces)
    local line name flags environment memory pool
    for line in "${BUILD_LINES[@]}"; do
        IFS="|" read -r name flags environment memory pool <<<"$line"
        [ "$name" = "$1" ] || continue
        read -r -a VCFLAGS <<<"$flags"
        VLDFLAGS=("${VCFLAGS[@]}" -sENVIRONMENT="$environment" -sMAXIMUM_MEMORY="${memory}GB")
        [ "$pool" = 0 ] || VLDFLAGS+=("${THREADS_LD[@]}")
        return 0
    done
    return 1
}

TOOLCHAIN_ID="$(cat "${TINYGPT_CACHE:-$HOME/.cache/tinygpt}/emsdk-trixie/.tinygpt-emscripten-ready" 2>/dev/null || command -v emcc || true)"
# Any header change recompiles every object (simple and safe; there are few headers).
HEADERS_HASH="$({ find "$SRC" -maxdepth 1 -type f -name '*.h' -print0 | sort -z | xargs -0 cat
                  cat "$RULES_DIR/config_rules_generated.h"; } | sha256sum | cut -c1-32)"

object_hash() {  # object_hash VARIANT SOURCE
    variant_flags "$1"
    { printf '%s\n' "${CFLAGS[@]}" "${VCFLAGS[@]}" "$TOOLCHAIN_ID" "$HEADERS_HASH"; cat "$2"; } | sha256sum | cut -c1-32
}

# Chromium names the Memory64 descriptor field `address`; Emscripten 3.1.69 writes the older
# `index: "i64"`, which Chromium 156 ignores: measured here, new WebAssembly.Memory({initial: 1n,
# maximum: 100000n, index: "i64"}) throws "Cannot convert a BigInt value to a number" and with
# Numbers is capped at 65536 pages (4 GiB), while the same with `address: "i64"` grows to 4.6 GB.
# The glue has two occurrences (its BigInt-bounds probe and the memory itself): rewrite both and
# fail the build if the old key survives or no `address` key appears (an Emscripten change).
fix_memory64_descriptor() {
    local glue="$1"
    sed -i -E 's/\bindex: *"i64"/address:"i64"/g; s/"index": *"i64"/"address":"i64"/g' "$glue"
    if grep -qE '(\bindex|"index"): *"i64"' "$glue"; then
        echo "build_wasm.sh: $glue still has an index:\"i64\" descriptor" >&2; return 1
    fi
    grep -q 'address:"i64"' "$glue" || {
        echo "build_wasm.sh: no Memory64 descriptor found in $glue (Emscripten changed?)" >&2; return 1; }
}

compile_object() {  # compile_object VARIANT SOURCE: $OUT/VARIANT/obj/NAME.o, skipped when up to date
    local v="$1" src="$2" obj hash
    obj="$OUT/$v/obj/$(basename "$src" .cpp).o"
    hash="$(object_hash "$v" "$src")"
    [ -f "$obj" ] && [ "$(cat "$obj.hash" 2>/dev/null)" = "$hash" ] && return 0
    mkdir -p "$OUT/$v/obj"
    echo "[build_wasm] $v: compile $(basename "$src")" >&2
    variant_flags "$v"
    if ! (cd "$REPO" && "$EMCC" "${CFLAGS[@]}" "${VCFLAGS[@]}" -I"$SRC" -I"$RULES_DIR" -c "$src" -o "$obj.tmp") >"$obj.log" 2>&1; then
        cat "$obj.log" >&2; echo "[build_wasm] $v: $(basename "$src") FAILED" >&2; rm -f "$obj.tmp"; return 1
    fi
    [ -s "$obj.log" ] && cat "$obj.log" >&2   # warnings
    mv "$obj.tmp" "$obj"; echo "$hash" >"$obj.hash"
}

link_variant() {  # link_variant VARIANT: $OUT/VARIANT/tinygpt.{mjs,wasm} + tinygpt_api.js
    local v="$1" dir="$OUT/$1" hash objs=()
    for src in "${SOURCES[@]}"; do objs+=("$dir/obj/$(basename "$src" .cpp).o"); done
    variant_flags "$v"
    hash="$({ printf '%s\n' "${LDFLAGS[@]}" "${VLDFLAGS[@]}" "$TOOLCHAIN_ID";
              for o in "${objs[@]}"; do cat "$o.hash"; done; } | sha256sum | cut -c1-32)"
    [ -f "$dir/tinygpt.mjs" ] && [ "$(cat "$dir/.link-hash" 2>/dev/null)" = "$hash" ] && return 0
    echo "[build_wasm] $v: link" >&2
    local t0=$SECONDS
    rm -f "$dir/.link-hash"
    (cd "$REPO" && "$EMCC" "${LDFLAGS[@]}" "${VLDFLAGS[@]}" "${objs[@]}" -o "$dir/tinygpt.mjs") >"$dir/link.log" 2>&1 ||
        { cat "$dir/link.log" >&2; echo "[build_wasm] $v: link FAILED" >&2; return 1; }
    if [ "$v" = memory64 ]; then fix_memory64_descriptor "$dir/tinygpt.mjs"; fi
    printf "export default %s;\n" "$signatures" >"$dir/tinygpt_api.js"
    echo "$hash" >"$dir/.link-hash"
    echo "[build_wasm] $v: linked in $((SECONDS - t0)) s" >&2
}

# Jobs run in parallel, at most one per core. Each writes its exit status to a file, so no status
# is lost however the jobs interleave.
status_dir="$(mktemp -d)"; trap 'rm -rf "$status_dir"' EXIT
run_jobs() {  # run_jobs FUNCTION ARGS-LINES...: one job per line ("a b" -> FUNCTION a b)
    local fn="$1" i=0 line; shift
    rm -f "$status_dir"/*
    for line in "$@"; do
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.1; done
        # shellcheck disable=SC2086
        ( $fn $line; echo $? >"$status_dir/$i" ) &
        i=$((i + 1))
    done
    wait
    for ((j = 0; j < i; j++)); do [ "$(cat "$status_dir/$j" 2>/dev/null)" = 0 ] || return 1; done
}

compile_jobs=()
for v in "${VARIANTS[@]}"; do for src in "${SOURCES[@]}"; do compile_jobs+=("$v $src"); done; done
run_jobs compile_object "${compile_jobs[@]}" || exit 1
run_jobs link_variant "${VARIANTS[@]}" || exit 1

printf "export default %s;\n" "$(cat "$BUILDS_JSON")" >"$OUT/builds.js"
if [ -n "$SITE" ]; then
    mkdir -p "$SITE"
    cmp -s "$OUT/builds.js" "$SITE/builds.js" || cp "$OUT/builds.js" "$SITE/builds.js"
    for v in "${VARIANTS[@]}"; do
        mkdir -p "$SITE/$v"
        for f in tinygpt.mjs tinygpt.wasm tinygpt_api.js; do
            cmp -s "$OUT/$v/$f" "$SITE/$v/$f" || cp "$OUT/$v/$f" "$SITE/$v/$f"
        done
    done
fi
echo "$ALL_INPUTS" >"$OUT/.all-inputs"
