"""webgpu/tools/dispatch_counts.mjs: the dispatches of a training step, an eval batch and a decoded token
per preset. Each is a dependent GPU launch (≥ 5 µs on an H100 with Dawn's barriers), so a fusion that
is undone shows here before it shows in a benchmark. A step of `large` took 177 before the fusions.
"""
from __future__ import annotations

import json
import subprocess

from conftest import ROOT


def test_dispatches_per_step_are_the_fused_plans():
    r = subprocess.run(["node", str(ROOT / "webgpu/tools/dispatch_counts.mjs")], capture_output=True, text=True,
                       timeout=120, check=True)
    counts = json.loads(r.stdout)
    presets = json.loads((ROOT / "site/static/presets.json").read_text())["presets"]
    for name, c in counts.items():
        print(f"{name}: {c['step']} dispatches per training step, {c['eval']} per eval batch, "
              f"{c['decode']} per decoded token")
    assert set(counts) == set(presets)
    for name, c in counts.items():
        L = presets[name]["nLayer"]
        assert c["eval"] == 4 + 7 * L  # embedding, L blocks, ln_f, logits, cross-entropy
        assert c["decode"] == 3 + 9 * L  # q, k, v apart: they write the KV cache at the position
        # a block: 7 forward, then 14 backward with its split-K sums in one dispatch, 10 of them when each
        # Linear's two products share one (small models), 17 with one sum per product (big ones; one
        # more for the head's); fewer where a weight gradient does not split K
        assert c["step"] <= 14 + 24 * L, (name, c["step"])
    assert (counts["tiny"]["step"], counts["large"]["step"]) == (12 + 17 * 2, 13 + 21 * 6)
