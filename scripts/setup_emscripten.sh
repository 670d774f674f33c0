#!/usr/bin/env bash
# Installs the Emscripten toolchain that builds the WebAssembly variants (wasm/builds.json lists them), once per machine.
#
# Why a Debian 13 (trixie) root: Debian 12's emscripten 3.1.6 cannot build a usable Memory64
# module (clang-14 crashes on wasm64 + SIMD, no wasm64 + pthreads), trixie's 3.1.69 can, and the
# project installs only Debian/PyPI/npm packages (no emsdk). The root lives outside the repo in
# $TINYGPT_CACHE/emsdk-trixie so fresh clones and CI reuse it. An emcc >= 3.1.60 already on PATH
# (a user with emsdk) is used instead and nothing is installed.
#
# Idempotent: every finished stage leaves a stamp; a warm machine only checks stamps (quiet, ~ms).
# debootstrap works in a temporary directory that is renamed on success, so an interrupted run
# never leaves a half-made root that looks finished.
set -euo pipefail

CACHE="${TINYGPT_CACHE:-$HOME/.cache/tinygpt}"
ROOT="$CACHE/emsdk-trixie"
READY="$ROOT/.tinygpt-emscripten-ready"
MIN_VERSION="3.1.60"
# Inside the root: a writable copy of the package's frozen system-library cache.
EM_CACHE_IN_ROOT="/var/cache/tinygpt-emcache"

version_at_least() {  # version_at_least HAVE WANT
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

host_emcc_version() {
    command -v emcc >/dev/null 2>&1 || return 1
    emcc --version 2>/dev/null | head -n1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1
}

if v="$(host_emcc_version)" && version_at_least "$v" "$MIN_VERSION"; then
    exit 0  # emcc.sh will use the host emcc
fi
[ -e "$READY" ] && exit 0

say() { echo "[setup_emscripten] $*" >&2; }
t0=$(date +%s)

# Runs a command chrooted into DIR with /proc, /dev and /sys mounted in a private mount namespace:
# the mounts vanish with the process, so nothing is left mounted inside the cache directory.
run_in_root() {
    local dir="$1"; shift
    unshare --mount --propagation private -- bash -c '
        set -e; d="$1"; shift
        mount -t proc proc "$d/proc"
        mount --rbind /dev "$d/dev"
        mount --rbind /sys "$d/sys"
        exec chroot "$d" "$@"' _ "$dir" "$@"
}

if [ ! -e "$ROOT/.tinygpt-debootstrap-done" ]; then
    command -v debootstrap >/dev/null 2>&1 || {
        say "installing debootstrap (host apt)"
        { apt-get install -y -o DPkg::Lock::Timeout=600 debootstrap >/dev/null 2>&1 ||
          { apt-get update -qq >/dev/null && apt-get install -y -o DPkg::Lock::Timeout=600 debootstrap >/dev/null; }; }
    }
    tmp="$ROOT.partial"
    if [ -e "$tmp" ]; then
        # A previous run was interrupted. Refuse to delete anything that is still a mount point.
        if findmnt -rn -o TARGET | grep -qF "$tmp"; then
            say "ERROR: $tmp has mounts under it; unmount them and re-run"; exit 1
        fi
        rm -rf --one-file-system "$tmp"
    fi
    mkdir -p "$CACHE"
    say "debootstrap --variant=minbase trixie (default mirror) into $tmp"
    debootstrap --variant=minbase trixie "$tmp" >"$CACHE/emsdk-trixie-debootstrap.log" 2>&1 || {
        say "ERROR: debootstrap failed; see $CACHE/emsdk-trixie-debootstrap.log"; exit 1; }
    touch "$tmp/.tinygpt-debootstrap-done"
    [ -e "$ROOT" ] && rm -rf --one-file-system "$ROOT"
    mv "$tmp" "$ROOT"
fi

if [ ! -e "$ROOT/.tinygpt-emscripten-installed" ]; then
    say "apt-get install emscripten inside the trixie root (~3 GB)"
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
    run_in_root "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get update -q >"$CACHE/emsdk-trixie-apt.log" 2>&1 &&
    run_in_root "$ROOT" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends emscripten >>"$CACHE/emsdk-trixie-apt.log" 2>&1 || {
        say "ERROR: apt-get install emscripten failed; see $CACHE/emsdk-trixie-apt.log"; exit 1; }
    touch "$ROOT/.tinygpt-emscripten-installed"
fi

# The package ships a read-only ("frozen") cache; wasm64 and pthread builds need system libraries
# it lacks, so emcc must be able to write them: copy it once and point EM_CACHE at the copy.
frozen="$(ls -d "$ROOT"/usr/share/emscripten/cache 2>/dev/null || true)"
[ -n "$frozen" ] || { say "ERROR: no cache folder under $ROOT/usr/share/emscripten"; exit 1; }
rm -rf "$ROOT$EM_CACHE_IN_ROOT"
cp -a "$frozen" "$ROOT$EM_CACHE_IN_ROOT"

v="$(run_in_root "$ROOT" emcc --version | head -n1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1)"
version_at_least "$v" "$MIN_VERSION" || { say "ERROR: trixie emcc is $v, need >= $MIN_VERSION"; exit 1; }
echo "$v" >"$READY"
say "emscripten $v ready in $ROOT ($(( $(date +%s) - t0 )) s)"
