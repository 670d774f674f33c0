"""tests/webgpu/hosts/software_plans.mjs: on an adapter that runs WGSL on the CPU (SwiftShader, llvmpipe) the
trainer runs each product on its tile's software twin (webgpu/kernels/matmul.js softwareTile): the same
output footprint with the fewest invocations, so the same grid, split counts and buffers, and a
SwiftShader step 2–2.5× faster. On a GPU adapter nothing changes."""
from __future__ import annotations

import json
import re
import subprocess

from conftest import ROOT


def footprint(tile: str) -> tuple[int, int]:
    m, n = re.match(r"(\d+)x(\d+)", tile).groups()
    return int(m), int(n)


def test_software_twins_keep_the_footprint_with_fewer_invocations():
    r = subprocess.run(["node", str(ROOT / "tests/webgpu/hosts/software_plans.mjs")], capture_output=True, text=True,
                       timeout=120, check=True)
    out = json.loads(r.stdout)
    for tile, (twin, threads, twin_threads) in out["twins"].items():
        print(f"{tile} ({threads} invocations) -> {twin} ({twin_threads})")
        assert footprint(twin) == footprint(tile) and twin_threads <= threads
        assert "-s" not in twin  # unsliced: a sliced tile's K-groups are more invocations at each barrier
        assert out["twins"][twin][0] == twin
    presets = json.loads((ROOT / "site/static/presets.json").read_text())["presets"]
    for limit, plans_of in out["presets"].items():
        assert set(plans_of) == set(presets)
        for name, plans in plans_of.items():
            gpu, soft = plans["gpu"], plans["software"]
            print(f"{name}, {limit} B of workgroup memory: GPU {gpu['step']} dispatches on {gpu['tiles']}; "
                  f"software {soft['step']} on {soft['tiles']}; "
                  f"{len(gpu['buffers'])} buffers, {sum(gpu['buffers'])} bytes")
            assert soft["buffers"] == gpu["buffers"]  # what memory checks and OPFS sizes assume holds on both
            assert set(soft["tiles"]) == {out["twins"][t][0] for t in gpu["tiles"]}
            assert soft["step"] >= gpu["step"]  # a pair whose twins do not pair becomes two dispatches
