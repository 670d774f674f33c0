"""bench/webgpu/dispatch_timeline.mjs (each dispatch's GPU time inside running steps; a speed only on a GPU,
run_device.sh's machine): on SwiftShader, that it times every dispatch of a tiny step in place and adds them
up by kernel family. Both tests pass --clocks-ms=0: the busy work that raises a GPU's clocks before the
rounds (2048³ products) took SwiftShader minutes, and its clocks mean nothing."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

pytestmark = pytest.mark.swiftshader


def test_every_dispatch_of_a_step_is_timed_in_place(tmp_path):
    out = tmp_path / "timeline.json"
    subprocess.run(["node", str(ROOT / "bench/webgpu/dispatch_timeline.mjs"), "tiny", str(out), "1", "0",
                    "--clocks-ms=0"], env=swiftshader_env(), check=True, capture_output=True, timeout=600)
    tiny = json.loads(out.read_text())["tiny"]
    print(f"{tiny['dispatches']} dispatches, span {tiny['spanUs'] / 1e3:.1f} ms, "
          f"families {[(f['family'], f['count']) for f in tiny['families']]}")
    assert tiny["dispatches"] == len(tiny["each"]) > 30
    assert all(d["us"] > 0 for d in tiny["each"])
    assert sum(f["count"] for f in tiny["families"]) == tiny["dispatches"]
    families = {f["family"] for f in tiny["families"]}
    assert {"matmul_forward", "attention_forward", "attention_backward", "adamw_update"} <= families
    # the dispatches run one after another: the last ends after all of them have run
    assert tiny["spanUs"] >= 0.5 * tiny["busyUs"]


def test_every_dispatch_of_a_decoded_token_is_timed_in_place(tmp_path):
    out = tmp_path / "timeline.json"
    subprocess.run(["node", str(ROOT / "bench/webgpu/dispatch_timeline.mjs"), "tiny", str(out), "1", "1", "--decode",
                    "--at=5", "--clocks-ms=0"], env=swiftshader_env(), check=True, capture_output=True, timeout=600)
    tiny = json.loads(out.read_text())["tiny"]
    print(f"{tiny['dispatches']} dispatches, span {tiny['spanUs'] / 1e3:.1f} ms, "
          f"families {[(f['family'], f['count']) for f in tiny['families']]}")
    presets = json.loads((ROOT / "site/static/presets.json").read_text())["presets"]
    # the token's decode plan and its sampling on the GPU
    assert tiny["dispatches"] == len(tiny["each"]) == 1 + 2 * presets["tiny"]["nLayer"] + 1
    assert tiny["position"] == 5  # --at: a token with 5 keys cached, not the window's last position
    assert all(d["us"] > 0 for d in tiny["each"])
    families = {f["family"] for f in tiny["families"]}
    assert families == {"attention_decode_qkv", "mlp_decode", "logits_decode", "sample_decode"}
    assert tiny["spanUs"] >= 0.5 * tiny["busyUs"]
