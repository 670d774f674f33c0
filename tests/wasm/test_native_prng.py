"""wasm/src/prng.cpp and the C++ init: docs/determinism.md's test vectors, and a whole model's initial
weights bit-identical to python_ref's initial_tensor_values."""
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from python_ref.config import model_config
from python_ref.model import initial_tensor_values
from support.tinygpt_native import NATIVE, NativeModel, ensure_built

ROOT = Path(__file__).resolve().parents[2]


def vectors() -> dict:
    text = (ROOT / "docs" / "determinism.md").read_text()
    block = re.search(r"```json test-vectors\n(.*?)```", text, re.S)
    assert block, "docs/determinism.md lacks its json test-vectors block"
    return json.loads(block.group(1))


def test_splitmix64_and_normals_match_the_vectors():
    ensure_built()
    v = vectors()
    seeds = sorted(v["splitmix64"], key=int)
    out = subprocess.run([NATIVE / "prng_vectors", *seeds], capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        kind, seed, *values = line.split()
        got[(kind, seed)] = values
    worst = 0.0
    for seed in seeds:
        assert got[("splitmix64", seed)] == v["splitmix64"][seed], seed
        normals = [float(x) for x in got[("normals", seed)]]
        worst = max(worst, max(abs(a - b) for a, b in zip(normals, v["normals"][seed])))
        assert normals == v["normals"][seed], (seed, normals)
    print(f"splitmix64 equal; normals max |diff| = {worst:.1e} (bit-identical)")


def test_tiny_init_matches_the_vectors_bit_for_bit():
    config = model_config("tiny")
    for seed, tensors in vectors()["tinyInit"].items():
        with NativeModel(config, batch=1) as m:
            m.init(int(seed))
            weights = m.weights()
        for name, hexes in tensors.items():
            got = [f"{b:08x}" for b in weights[name].reshape(-1)[: len(hexes)].view(np.uint32)]
            assert got == hexes, (seed, name, got, hexes)
    print("tinyInit vectors: bit-identical")


@pytest.mark.parametrize("threads", [1, 2])
def test_whole_model_init_equals_python_ref(threads):
    """Init is split across the pool; the counter-based stream makes every split bit-identical."""
    for preset, seed in (("tiny", 0), ("tiny", 1337), ("small", 7)):
        config = model_config(preset)
        with NativeModel(config, batch=1, n_threads=threads) as m:
            m.init(seed)
            weights = m.weights()
        differing = 0
        for name, want in initial_tensor_values(config, seed):
            differing += int(np.count_nonzero(weights[name].view(np.uint32) != want.view(np.uint32)))
        print(f"{preset} seed {seed}, {threads} thread(s): {config.param_count()} weights, "
              f"{differing} differ in any bit")
        assert differing == 0
