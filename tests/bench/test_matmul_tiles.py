"""bench/webgpu/matmul_tiles.mjs (the data behind chooseTile/chooseSplits; its timings mean something on a GPU
only, run_device.sh's machine): on SwiftShader, that it runs a preset's products on the tiles asked for,
times the trainer's own choice beside them and the floor, and writes what torch_products.py reads."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

pytestmark = pytest.mark.swiftshader


def test_tiles_of_a_preset_and_the_floor(tmp_path):
    # SwiftShader runs each timed dispatch on the CPU (50 ms and more a product): 4 back-to-back products a
    # timing and no warm-up replays (its clocks and caches mean nothing) keep every product, tile and split
    # timed; the floor's 4×4×4 product, a few ms there, keeps 10, where a millisecond of host noise cannot
    # make it negative
    out = tmp_path / "tiles.json"
    subprocess.run(["node", str(ROOT / "bench/webgpu/matmul_tiles.mjs"), "--presets", "tiny", "--tiles", "32x32-s2",
                    "--clocks-ms", "0", "--reps", "4", "--floor-reps", "10", "--warmup", "0", "--out", str(out)],
                   env=swiftshader_env(), check=True, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())
    floor, products = rows[0], rows[1:]
    print(f"floor row {floor}; {len(products)} products of tiny")
    assert floor["floor"] and floor["us"] > 0
    assert len(products) == 12 and all(r["preset"] == "tiny" for r in products)
    for r in products:
        tried = {(x["tile"], x["splits"]) for x in r["results"]}
        # only the tile asked for, with each split count that keeps ≥ 64 of K: 1–16 for weight
        # gradients, 1–4 for the other products once K ≥ 128
        splits = (1, 2, 4, 8, 16) if r["form"] == "backward_weight" else (1, 2, 3, 4) if r["K"] >= 128 else (1,)
        assert {t for t, _ in tried} == {"32x32-s2"}
        assert len(tried) == sum(1 for s in splits if s == 1 or r["K"] / s >= 64)
        assert r["chosen"]["us"] > 0 and r["count"] >= 1
