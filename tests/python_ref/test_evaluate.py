"""Evaluation: loss over windows covering a file, bits per byte = loss / ln 2, the val-window metric."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from python_ref.config import DEFAULT_CORPUS, ModelConfig, model_config
from python_ref.data import Corpus, CorpusError
from python_ref.evaluate import bits_per_byte, covering_loss, evaluate_file, evaluate_val, split_settings
from python_ref.model import TinyGPT
from python_ref.train import new_run


def test_covering_loss_is_the_mean_over_every_byte():
    """A 2-window + tail file against position-by-position cross-entropy computed one window at a time."""
    model = TinyGPT(ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=16), seed=5)
    data = np.frombuffer(DEFAULT_CORPUS.read_bytes()[:40], dtype=np.uint8)  # windows 0..15, 16..31, tail 32..38
    losses = []
    with torch.no_grad():
        for s in range(0, 39, 16):
            chunk = torch.from_numpy(data[s:min(s + 17, 40)].astype(np.int64))[None]
            logits, _ = model(chunk[:, :-1])
            losses += F.cross_entropy(logits[0], chunk[0, 1:], reduction="none").tolist()
    loss, positions = covering_loss(model, data)
    print(f"covering loss vs per-position mean: |diff| = {abs(loss - np.mean(losses)):.3e}")
    assert positions == 39 == len(losses)
    assert loss == pytest.approx(float(np.mean(losses)), abs=1e-6)
    with pytest.raises(CorpusError, match="at least 2"):
        covering_loss(model, data[:1])


def test_bits_per_byte_and_sane_numbers(tmp_path):
    model = TinyGPT(model_config("tiny"), seed=0)
    path = tmp_path / "text.txt"
    path.write_bytes(DEFAULT_CORPUS.read_bytes()[:3000])
    r = evaluate_file(model, path)
    print(f"random-init tiny on 3000 bytes: loss {r.loss:.4f} (ln 256 = {math.log(256):.4f}), bpb {r.bpb:.4f}; "
          f"|loss/ln2 - bpb| = {abs(r.loss / math.log(2) - r.bpb):.1e}")
    assert r.positions == 2999 and r.bpb == r.loss / math.log(2) == bits_per_byte(r.loss)
    assert abs(r.loss - math.log(256)) < 0.05 and abs(r.bpb - 8) < 0.1


def test_val_metrics_match_training(tmp_path):
    corpus = Corpus.from_bytes(DEFAULT_CORPUS.read_bytes()[:20_000], "s.txt")
    run = new_run("tiny", corpus, "cpu", steps=5, lr=3e-3)
    run.run(5, progress=False)
    split, windows = evaluate_val(run.model, corpus, *split_settings({"training": run.train_cfg.to_json()}))
    print(f"trained 5 steps: val split loss {split.loss:.4f} ({split.bpb:.4f} bpb), val windows {windows.loss:.4f}; "
          f"|windows - valHistory| = {abs(windows.loss - run.val_history[-1][1]):.1e}")
    assert windows.loss == run.val_history[-1][1]  # the same metric as during training, bit for bit
    assert split.positions == 2000 - 1 and windows.positions == 64 * 32
    assert split.bpb == split.loss / math.log(2)
    assert 3.0 < split.loss < math.log(256) + 0.05  # 5 steps at lr 3e-3 already beat uniform
    assert split_settings({}) == (0.1, 64)
