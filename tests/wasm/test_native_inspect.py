"""The look inside of the C++ core (wasm/src/inspect.cpp through tg_attention and
tg_gen_last_probs) against python_ref/look_inside.py on the same weights."""
import numpy as np
import pytest

from python_ref.config import model_config
from python_ref.look_inside import attention_weights, generation_probs
from python_ref.tinygpt_file import model_from_state, read_state
from support.random_model import random_model_file
from support.tinygpt_native import NativeError, NativeModel, _check, lib, state_bytes_of_file

PROMPT = b"ROMEO:\nBut soft, what light\x07!"  # a control byte too; 29 of tiny's 32 positions


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    return random_model_file(tmp_path_factory.mktemp("inspect") / "random.tinygpt")


@pytest.fixture(scope="module")
def native(weights_file):
    with NativeModel(model_config("tiny"), batch=2, n_threads=2) as m:
        m.import_state(state_bytes_of_file(weights_file))
        yield m


@pytest.mark.parametrize("tokens", [PROMPT, PROMPT[:1], bytes(range(200, 232))], ids=["prompt", "one byte", "full ctx"])
def test_attention_matches_python_ref(native, weights_file, tokens):
    got = native.attention(tokens)
    ref = attention_weights(model_from_state(read_state(weights_file)), tokens)
    diff = float(np.abs(got - ref).max())
    print(f"\ntg_attention {got.shape} vs python_ref: max difference {diff:.3g} (bar 1e-5); "
          f"max row-sum error {float(np.abs(got.sum(-1) - 1).max()):.3g}; peak weight {float(got.max()):.3f}")
    assert got.shape == ref.shape and diff < 1e-5
    assert np.all(np.triu(got, 1) == 0)


def test_attention_refuses_bad_arguments(native):
    for tokens in (b"", bytes(33)):
        with pytest.raises(NativeError, match="outside 1..ctx"):
            native.attention(tokens)


@pytest.mark.parametrize("temperature,top_k,seed", [(0.0, 0, 0), (0.8, 40, 5)], ids=["greedy", "T 0.8 top-k 40"])
def test_generation_probs_match_python_ref(native, weights_file, temperature, top_k, seed):
    n = 40  # past tiny's ctx of 32: the window restarts on the way
    got = native.generate_with_probs(PROMPT, n, temperature, top_k, seed)
    ref = generation_probs(model_from_state(read_state(weights_file)), PROMPT, n, temperature, top_k, seed)
    assert [t for t, _ in got] == [t for t, _ in ref]
    diff = max(float(np.abs(p - q).max()) for (_, p), (_, q) in zip(got, ref))
    print(f"\n{n} tokens, tg_gen_last_probs vs python_ref softmax: max difference {diff:.3g} (bar 1e-5); "
          f"tokens {bytes(t for t, _ in got)[:30]!r}")
    assert diff < 1e-5


def test_gen_last_probs_needs_a_generated_token(native):
    native.attention(PROMPT)  # its forward overwrites the KV cache: any session ends
    with pytest.raises(NativeError, match="no token generated"):
        _check(lib().tg_gen_last_probs(native.h, np.empty(256, np.float32).ctypes.data))
