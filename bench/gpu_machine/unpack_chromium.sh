#!/bin/bash
# On the GPU machine: join the parts that pack_chromium.sh cut and earlier calls staged in
# ${CHROMIUM_STAGE:-/tmp/chrstage}, unpack their debs into /tmp/chr-root, and write /tmp/chr-root/chromium,
# which runs Debian's headless Chromium on the carried libraries (python and node keep this machine's
# own). Prints its path.
set -euo pipefail
stage=${CHROMIUM_STAGE:-/tmp/chrstage} chr=/tmp/chr-root
rm -rf "$chr" && mkdir -p "$chr/debs"
cat $(ls "$stage"/chromium-debs.tar.* | sort -t. -k3 -n) | tar -C "$chr/debs" -xf -
ls "$chr"/debs/chromium-headless-shell_*.deb "$chr"/debs/chromium-common_*.deb > /dev/null  # every part was staged
for f in "$chr"/debs/*.deb; do dpkg -x "$f" "$chr"; done
# libpulse finds its common part by an absolute RUNPATH (/usr/lib/x86_64-linux-gnu/pulseaudio): named here
libs="$chr/usr/lib/x86_64-linux-gnu:$chr/lib/x86_64-linux-gnu:$chr/usr/lib/x86_64-linux-gnu/pulseaudio"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s FONTCONFIG_PATH=%s exec %s "$@"\n' "$libs" "$chr/etc/fonts" \
  "$chr/usr/lib/chromium/chromium-headless-shell" > "$chr/chromium"
chmod +x "$chr/chromium"
echo "$chr/chromium"
