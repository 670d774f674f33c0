"""wasm/src/generate.cpp: KV-cache decoding equals full recompute token for token, and both equal
python_ref/sample.py (same weights, same sample seed), across context restarts."""
import numpy as np
import pytest

from python_ref.config import model_config
from python_ref.model import manifest
from python_ref.sample import generate
from python_ref.tinygpt_file import CheckpointState, model_from_state, read_state, write_state
from support.tinygpt_native import NativeModel, state_bytes_of_file

PROMPT = b"ROMEO:\nBut soft, what light"
NEW = 80  # tiny's ctx is 32: the window restarts several times


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    """Random weights with a wide logit spread, so sampling is decided by the model, not by ties."""
    config = model_config("tiny")
    rng = np.random.default_rng(8)
    weights = {}
    for name, shape in manifest(config):
        if ".ln" in name or name.startswith("ln_f"):
            weights[name] = np.full(shape, 1.0 if name.endswith(".weight") else 0.0, np.float32)
        else:
            weights[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    path = tmp_path_factory.mktemp("gen") / "random.tinygpt"
    write_state(path, CheckpointState(config, 0, weights))
    return path


CASES = [("greedy", 0.0, 0, 0), ("top-k 40, T 0.8", 0.8, 40, 5), ("all tokens, T 1.3", 1.3, 0, 123)]


@pytest.mark.parametrize("label,temperature,top_k,seed", CASES)
def test_kv_cache_equals_recompute_and_python_ref(weights_file, label, temperature, top_k, seed):
    config = model_config("tiny")
    with NativeModel(config, batch=1, n_threads=2) as m:
        m.import_state(state_bytes_of_file(weights_file))
        cached = m.generate(PROMPT, NEW, temperature, top_k, seed, use_cache=True)
        recomputed = m.generate(PROMPT, NEW, temperature, top_k, seed, use_cache=False)
    model = model_from_state(read_state(weights_file))
    reference = generate(model, PROMPT, NEW, temperature, top_k, seed, use_cache=True)

    def agree(a, b):
        return next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), len(a))

    print(f"\n{label}: {NEW} tokens after a {len(PROMPT)}-byte prompt (ctx {config.ctx}); "
          f"C++ cache vs recompute agree on {agree(cached, recomputed)}/{NEW}, "
          f"C++ vs python_ref on {agree(cached, reference)}/{NEW}: {cached[:40]!r}")
    assert len(cached) == NEW
    assert cached == recomputed
    assert cached == reference
