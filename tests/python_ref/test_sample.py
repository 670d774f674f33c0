"""Sampling: the portable token pick, the context policy, KV-cache generation == full recompute."""
import io

import numpy as np
import pytest
import torch

from python_ref.config import DEFAULT_CORPUS, ConfigError, ModelConfig, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.model import TinyGPT
from python_ref.prng import SampleStream
from python_ref.sample import KVCacheDecoder, RecomputeDecoder, Utf8Writer, advance_window, generate, pick_token
from python_ref.train import make_optimizer, train_step

CTX = 8  # small, so that 40 new tokens cross the context boundary several times


@pytest.fixture(scope="module")
def model():
    """A 2-layer, ctx-8 model trained 40 steps on Shakespeare, so its logits are peaked like a real model's."""
    config = ModelConfig(nLayer=2, nHead=2, dModel=16, ctx=CTX)
    train_cfg = train_config("tiny", lr=1e-2)
    m = TinyGPT(config, seed=3)
    optimizer = make_optimizer(m, train_cfg)
    train, _ = Corpus.from_bytes(DEFAULT_CORPUS.read_bytes()[:20_000], "s").split(train_cfg.valFraction, CTX)
    stream = BatchStream(train, CTX, 16, seed=3)
    for _ in range(40):
        x, y = (torch.from_numpy(a) for a in stream.next())
        train_step(m, optimizer, x, y, train_cfg.gradClip)
    return m.eval()


@pytest.fixture(scope="module")
def wild_model():
    """Random weights scaled 25x: logits far from uniform, so greedy decoding wanders through many bytes."""
    m = TinyGPT(ModelConfig(nLayer=2, nHead=2, dModel=16, ctx=CTX), seed=11)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.mul_(25)
    return m.eval()


def test_context_policy():
    w = []
    for t in range(CTX):
        w = advance_window(w, t, CTX)
    assert w == list(range(CTX))
    w = advance_window(w, 99, CTX)  # full: restart from the last ctx//2, then append
    assert w == [4, 5, 6, 7, 99]
    w = []
    for t in range(21):
        w = advance_window(w, t, CTX)
    assert w == [16, 17, 18, 19, 20]  # 8 full -> [4..7, 8] .. [8..11, 12] -> [12..15, 16] .. -> [16..19, 20]
    odd = []
    for t in range(8):
        odd = advance_window(odd, t, 7)
    assert odd == [4, 5, 6, 7]  # ctx 7: restart keeps 7 // 2 = 3


def test_pick_token_rules():
    logits = np.zeros(256, dtype=np.float32)
    logits[[10, 200]] = 5.0
    stream = SampleStream(0)
    assert pick_token(logits, 0.0, 0, stream) == 10 and stream.drawn == 0  # greedy: lowest index, no draw
    assert pick_token(logits, 1.0, 1, stream) == 10 and stream.drawn == 1  # top-1 tie keeps the lower index
    picks = {pick_token(logits, 1.0, 2, stream) for _ in range(50)}
    assert picks == {10, 200} and stream.drawn == 51
    # Cumulative rule by hand: p = exp(l - max), first index whose running sum exceeds u * sum(p).
    logits = np.log(np.array([1.0, 2.0, 3.0, 4.0] + [1e-30] * 252)).astype(np.float32)
    for seed in range(20):
        u = SampleStream(seed).next_uniform()
        p = np.exp(logits.astype(np.float64) - logits.max())
        expected = int(np.flatnonzero(np.cumsum(p) > u * np.cumsum(p)[-1])[0])
        assert pick_token(logits, 1.0, 4, SampleStream(seed)) == expected
    with pytest.raises(ConfigError, match="empty"):
        generate(TinyGPT(ModelConfig(1, 1, 4, 4), 0), b"", 3, 1.0, 0, 0)


@pytest.mark.parametrize("which", ["model", "wild_model"])
@pytest.mark.parametrize("temperature,top_k,seed", [(0.0, 0, 0), (0.8, 40, 42), (1.0, 0, 7), (1.3, 5, 123)])
def test_kv_cache_equals_recompute(request, which, temperature, top_k, seed):
    model = request.getfixturevalue(which)
    prompt = b"ROMEO:"
    cached = generate(model, prompt, 40, temperature, top_k, seed, use_cache=True)
    full = generate(model, prompt, 40, temperature, top_k, seed, use_cache=False)
    # The logits of both decoders along the same windows, to show how close the two paths are.
    kv, rc = KVCacheDecoder(model), RecomputeDecoder(model)
    window, worst = [], 0.0
    for token in prompt + cached:
        window = advance_window(window, token, CTX)
        worst = max(worst, float((kv.last_logits(window) - rc.last_logits(window)).abs().max()))
    print(f"{which} T={temperature} top-k={top_k} seed={seed}: {cached!r}; KV-cache vs recompute "
          f"max |logit diff| = {worst:.3e}")
    assert cached == full and len(cached) == 40
    assert worst < 1e-4


def test_long_prompt_and_streaming(model):
    prompt = b"First Citizen:\nBefore we proceed any further"  # longer than ctx: windowed by the same policy
    seen = []
    cached = generate(model, prompt, 30, 0.9, 20, 5, use_cache=True, on_token=seen.append)
    assert bytes(seen) == cached
    assert cached == generate(model, prompt, 30, 0.9, 20, 5, use_cache=False)
    assert cached != generate(model, prompt, 30, 0.9, 20, 6, use_cache=True)  # another seed, another text
    assert not model.training


def test_utf8_writer_holds_back_split_sequences():
    out = io.StringIO()
    w = Utf8Writer(out.write)
    for b in "é€".encode() + b"\xe2\x82":  # two whole characters, then an incomplete one
        w(b)
    assert out.getvalue() == "é€"
    w.finish()
    assert out.getvalue() == "é€\ufffd"
