"""The look inside of the WebGPU engine (webgpu/inspect.js, the logits the trainer samples from)
under Node (npm `webgpu`: Dawn on SwiftShader), driven by tests/webgpu/hosts/webgpu_inspect_driver.mjs,
against python_ref/look_inside.py on the same random tiny model."""
import json
import subprocess

import numpy as np

from conftest import ROOT, swiftshader_env
from python_ref.look_inside import attention_weights, generation_probs, top_bytes
from python_ref.tinygpt_file import model_from_state, read_state
from support.random_model import random_model_file
from support.tinygpt_native import state_bytes_of_file

DRIVER = ROOT / "tests/webgpu/hosts/webgpu_inspect_driver.mjs"
PROMPT = b"ROMEO:\nBut soft\x07!"
NEW = 6


def test_attention_and_top5_match_python_ref(tmp_path):
    path = random_model_file(tmp_path / "random.tinygpt")
    (tmp_path / "state").write_bytes(state_bytes_of_file(path))
    env = swiftshader_env()
    r = subprocess.run(["node", str(DRIVER), str(tmp_path / "state"), PROMPT.hex(), str(NEW)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["fatals"] == []
    model = model_from_state(read_state(path))

    ref = attention_weights(model, PROMPT)
    weights = np.array(got["weights"], np.float32).reshape(ref.shape)
    diff = float(np.abs(weights - ref).max())
    print(f"\nWebGPU attention {ref.shape} vs python_ref: max difference {diff:.3g} (bar 1e-5)")
    assert got["T"] == len(PROMPT) and diff < 1e-5

    steps = generation_probs(model, PROMPT, NEW, 0.0, 0, 0)
    assert [s["token"] for s in got["sample"]] == [t for t, _ in steps]
    top_diff = 0.0
    for s, (_, probs) in zip(got["sample"], steps):
        want = top_bytes(probs)
        assert [t["byte"] for t in s["top"]] == [b for b, _ in want]
        top_diff = max(top_diff, max(abs(t["p"] - p) for t, (_, p) in zip(s["top"], want)))
    print(f"greedy {NEW} tokens {bytes(s['token'] for s in got['sample'])!r}: top-5 probabilities vs python_ref "
          f"max difference {top_diff:.3g} (bar 1e-5)")
    assert top_diff < 1e-5
