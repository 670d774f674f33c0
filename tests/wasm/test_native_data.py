"""wasm/src/data.cpp: the corpus split, the batch stream and the eval windows against python_ref."""
import json
import re
from pathlib import Path

import pytest

from python_ref.config import DEFAULT_CORPUS, ModelConfig, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.evaluate import val_windows_loss
from python_ref.model import TinyGPT
from support.tinygpt_native import NativeError, NativeModel

ROOT = Path(__file__).resolve().parents[2]

# The smallest model that carries a ctx: batches and windows do not depend on the other dims.
def small_model(ctx: int, batch: int) -> NativeModel:
    return NativeModel(ModelConfig(nLayer=1, nHead=1, dModel=4, ctx=ctx), batch=batch)


def test_first_batch_starts_match_the_vectors():
    text = (ROOT / "docs" / "determinism.md").read_text()
    v = json.loads(re.search(r"```json test-vectors\n(.*?)```", text, re.S).group(1))["firstBatchStarts"]
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    val_fraction = train_config("small").valFraction
    train, _ = corpus.split(val_fraction, v["ctx"])
    assert train.size == v["nTrain"]
    for seed in ("0", "42"):
        with small_model(v["ctx"], v["batch"]) as m:
            m.set_corpus(corpus.data, val_fraction)
            m.set_data_state(int(seed), 0)
            for key in ("batch0", "batch1"):
                x, y = m.next_batch()
                for row, start in enumerate(v[seed][key]):
                    assert (x[row] == train[start:start + v["ctx"]]).all(), (seed, key, row)
                    assert (y[row] == train[start + 1:start + v["ctx"] + 1]).all(), (seed, key, row)
    print("firstBatchStarts: rows equal the corpus windows at the listed starts")


def test_batch_stream_equals_python_ref_and_resumes():
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    ctx, B, seed = 48, 5, 1337
    train, _ = corpus.split(0.1, ctx)
    ref = BatchStream(train, ctx, B, seed)
    with small_model(ctx, B) as m:
        m.set_corpus(corpus.data, 0.1)
        m.set_data_state(seed, 0)
        for _ in range(20):
            (x, y), (rx, ry) = m.next_batch(), ref.next()
            assert (x == rx).all() and (y == ry).all()
        assert m.batches_drawn == ref.batches_drawn == 20
        m.set_data_state(seed, 1000)
        ref = BatchStream(train, ctx, B, seed, batches_drawn=1000)
        (x, _), (rx, _) = m.next_batch(), ref.next()
        assert (x == rx).all()
    print("20 batches and a resume at batchesDrawn=1000: identical to python_ref's BatchStream")


def test_eval_windows_loss_equals_python_ref():
    config, train_cfg = model_config("tiny"), train_config("tiny")
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    _, val = corpus.split(train_cfg.valFraction, config.ctx)
    model = TinyGPT(config, seed=3)
    for windows in (train_cfg.evalWindows, 5, 1):
        want = val_windows_loss(model, val, windows)
        with NativeModel(config, batch=train_cfg.batch) as m:
            m.init(3)
            m.set_corpus(corpus.data, train_cfg.valFraction)
            got = m.eval(windows)
        rel = abs(got - want) / want
        print(f"evalWindows {windows}: C++ {got:.7f} python_ref {want:.7f} rel diff {rel:.1e}")
        assert rel < 1e-5


@pytest.mark.parametrize("size", [0, 40, 100])
def test_short_corpus_is_refused_with_the_reason(size):
    with small_model(64, 2) as m:
        with pytest.raises(NativeError) as e:
            m.set_corpus(b"x" * size, 0.1)
        print(f"{size} bytes: {e.value}")
        assert "empty" in str(e.value) or "too short" in str(e.value)
