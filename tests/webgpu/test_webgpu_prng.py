"""webgpu/prng.js (run by Node, no GPU needed) against docs/determinism.md's test vectors and python_ref."""
import base64
import json
import re
import subprocess
from pathlib import Path

import numpy as np

from python_ref.config import init_std, model_config
from python_ref.data import eval_window_starts
from python_ref.model import initial_tensor_values
from python_ref.prng import SampleStream, batch_offsets
from python_ref.sample import pick_token

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads(re.search(r"```json test-vectors\n(.*?)```", (ROOT / "docs/determinism.md").read_text(),
                               re.S).group(1))
TINY = model_config("tiny")


def dump(job):
    r = subprocess.run(["node", str(ROOT / "tests/webgpu/hosts/prng_dump.mjs")], input=json.dumps(job),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


RNG = np.random.default_rng(7)
LOGITS = (RNG.standard_normal((40, 256)) * 3).astype(np.float32)
LOGITS[0, :] = 1.0  # all tied
# the top-k's last value tied across its edge, where most of the probability is: 2 values above 60 equal ones,
# placed at random, so that keeping other tied indices than the lowest 38 would change most samples
for row in range(1, 9):
    LOGITS[row] = -50.0
    at = RNG.permutation(256)
    LOGITS[row, at[:2]] = 1.0
    LOGITS[row, at[2:62]] = 0.999
JOB = {
    "seeds": [0, 42, 2**53 - 1], "config": TINY.to_json(), "initStd": init_std(),
    "batches": VECTORS["firstBatchStarts"] | {"nTrain": VECTORS["firstBatchStarts"]["nTrain"]},
    "eval": {"nVal": 111539, "ctx": 64, "windows": 64},
    "sampling": {"seed": 5, "temperature": 0.8, "topK": 40, "logits": LOGITS.tolist()},
}


def test_js_prng_matches_vectors_and_python_ref():
    out = dump(JOB)
    for seed in ("0", "42"):
        assert out["splitmix64"][seed] == VECTORS["splitmix64"][seed]
        assert out["normals"][seed] == VECTORS["normals"][seed]  # bit-exact doubles
        init = np.frombuffer(base64.b64decode(out["init"][seed]), dtype=np.float32)
        bits = init.view(np.uint32)
        vec = VECTORS["tinyInit"][seed]
        assert [f"{b:08x}" for b in bits[:4]] == vec["token_embedding.weight"]
        starts = VECTORS["firstBatchStarts"][seed]
        assert out["batches"][seed][0][:4] == starts["batch0"] and out["batches"][seed][1][:2] == starts["batch1"]
    print("spec vectors: splitmix64, normals, tinyInit, firstBatchStarts all equal")
    fb = VECTORS["firstBatchStarts"]
    for seed in (0, 42, 2**53 - 1):
        js = np.frombuffer(base64.b64decode(out["init"][str(seed)]), dtype=np.float32)
        py = np.concatenate([v.ravel() for _, v in initial_tensor_values(TINY, seed)])
        differing = int(np.sum(js.view(np.uint32) != py.view(np.uint32)))
        print(f"tiny init seed {seed}: {js.size} floats, {differing} differ bitwise from python_ref")
        assert differing == 0
        for b in range(3):
            assert out["batches"][str(seed)][b] == batch_offsets(seed, b, fb["batch"],
                                                                 fb["nTrain"] - fb["ctx"]).tolist()
    assert out["eval"] == eval_window_starts(111539, 64, 64).tolist()
    stream = SampleStream(5)
    py_samples = [pick_token(row, 0.8, 40, stream) for row in LOGITS]
    assert out["samples"] == py_samples and out["samplesDrawn"] == stream.drawn
    print(f"sampling: {len(py_samples)} tokens equal to python_ref's pick_token")
