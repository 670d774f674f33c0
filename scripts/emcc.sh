#!/usr/bin/env bash
# Runs an Emscripten tool (emcc by default; em++ when called as em++.sh) with arguments as given.
# Uses the host's emcc when it is >= 3.1.60; otherwise the Debian trixie root made by
# setup_emscripten.sh, entered through chroot with this repo and /tmp bind-mounted at the same
# paths, so every path means the same inside and outside. The mounts are made in a private mount
# namespace (unshare), so they disappear with the command: nothing stays mounted in the cache and
# concurrent builds do not interfere.
set -euo pipefail

tool="$(basename "$0" .sh)"
case "$tool" in emcc|em++|emar|emranlib) ;; *) tool=emcc ;; esac
CACHE="${TINYGPT_CACHE:-$HOME/.cache/tinygpt}"
ROOT="$CACHE/emsdk-trixie"
REPO="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd -P)"
MIN_VERSION="3.1.60"

if command -v emcc >/dev/null 2>&1; then
    v="$(emcc --version 2>/dev/null | head -n1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1 || true)"
    if [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$v" | sort -V | head -n1)" = "$MIN_VERSION" ]; then
        exec "$tool" "$@"
    fi
fi

[ -e "$ROOT/.tinygpt-emscripten-ready" ] || {
    echo "emcc.sh: no Emscripten toolchain; run scripts/setup_emscripten.sh (or make setup)" >&2
    exit 1; }

cwd="$(pwd -P)"
case "$cwd/" in "$REPO"/*|/tmp/*) ;; *)
    echo "emcc.sh: run from inside $REPO or /tmp (only those are visible to the toolchain root)" >&2
    exit 1 ;;
esac
mkdir -p "$ROOT$REPO"

exec unshare --mount --propagation private -- bash -c '
    set -e
    root="$1" repo="$2" cwd="$3"; shift 3
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --bind /tmp "$root/tmp"
    mount --bind "$repo" "$root$repo"
    exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin \
        EM_CACHE=/var/cache/tinygpt-emcache EM_FROZEN_CACHE= \
        bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"' _ "$ROOT" "$REPO" "$cwd" "$tool" "$@"
