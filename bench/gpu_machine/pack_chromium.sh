#!/bin/bash
# Here (the dev machine: Debian, after `make setup` installed its chromium): pack Debian's headless
# Chromium of the same version, and the libraries it links that a bare GPU machine lacks, for
# run_device.sh's CHROMIUM=1. A call carries at most 64 MiB with the working tree, so the debs travel as
# one tar cut in two, .chrcarry/1 and .chrcarry/2 (~49 MiB each): one call each of the same held machine
# copies its half to /tmp/chrstage, then unpack_chromium.sh joins them. .chrcarry/ must be listed in
# .git/info/exclude (never committed). Only Debian's archive is used.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=$(dpkg-query -W -f='${Version}' chromium)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/debs" "$WORK/root"
download() { (cd "$WORK/debs" && apt-get download -qq -o APT::Sandbox::User=root "$@"); }
download "chromium-headless-shell=$VERSION" "chromium-common=$VERSION"
dpkg -x "$WORK"/debs/chromium-headless-shell_*.deb "$WORK/root"
# the packages of every library the binary links (as this machine resolves them), less the C and C++
# runtimes, which the GPU machine's own newer ones serve; fontconfig's configuration and ALSA's data too
packages=$(ldd "$WORK/root/usr/lib/chromium/chromium-headless-shell" | awk '$3 ~ /^\// {print $3}' |
  while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib"; done | cut -d: -f1 | sort -u |
  grep -v -x -e libc6 -e libgcc-s1 -e 'libstdc++6')
# shellcheck disable=SC2086  # one package a word
download $packages fontconfig-config libasound2-data
rm -rf .chrcarry && mkdir -p .chrcarry
tar -C "$WORK/debs" -cf "$WORK/debs.tar" .
split -n 2 -d -a 1 "$WORK/debs.tar" "$WORK/part."
for n in 1 2; do
  mkdir -p ".chrcarry/$n" && mv "$WORK/part.$((n - 1))" ".chrcarry/$n/chromium-debs.tar.$n"
done
du -sh .chrcarry/*
