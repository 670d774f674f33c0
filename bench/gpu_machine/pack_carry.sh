#!/bin/bash
# Here (the dev machine, after `make setup`): pack Node and the npm `webgpu` package into .wgcarry/
# for run_device.sh. Both folders must be listed in .git/info/exclude (never committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
NM=$(readlink -f webgpu/node_modules)
rm -rf .wgcarry && mkdir -p .wgcarry/webgpu/dist/linux-x64
cp "$NM/webgpu/index.js" "$NM/webgpu/package.json" .wgcarry/webgpu/
xz -T2 -6 -c "$NM/webgpu/dist/linux-x64/dawn.node" > .wgcarry/webgpu/dist/linux-x64/dawn.node.xz
xz -T2 -6 -c "$(command -v node)" > .wgcarry/node.xz
du -sh .wgcarry
