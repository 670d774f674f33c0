"""python_ref's half precision (issue 61): `--precision bf16|fp16` autocasts the forward pass (matmuls in
half precision, LayerNorm, softmax and cross-entropy in fp32), fp32 master weights and AdamW moments; fp16
adds a dynamic loss scale that skips and halves on overflow and grows after clean steps. The reference the
WGSL mixed-precision trainer is checked against; fp32 stays the oracle of the fp32 engines."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from python_ref import tinygpt_file
from python_ref.config import DEFAULT_CORPUS, model_config, train_config
from python_ref.data import Corpus
from python_ref.model import TinyGPT
from python_ref.train import RunOptions, make_optimizer, new_run, resume_run, train_step


@pytest.fixture(scope="module")
def corpus():
    return Corpus.from_bytes(DEFAULT_CORPUS.read_bytes()[:40_000], "shakespeare-40k.txt")


def losses(corpus, precision: str, steps: int = 8) -> list[float]:
    run = new_run("tiny", corpus, "cpu", options={"precision": precision}, steps=steps, evalEvery=0)
    run.run(steps, progress=False)
    return [loss for _, loss in run.loss_history]


def test_half_precisions_follow_fp32_closely(corpus):
    fp32 = losses(corpus, "fp32")
    for precision in ("bf16", "fp16"):
        half = losses(corpus, precision)
        worst = max(abs(a - b) / b for a, b in zip(half, fp32))
        print(f"{precision}: losses {[round(x, 4) for x in half]}; fp32 {[round(x, 4) for x in fp32]}; "
              f"max relative difference {worst:.2e}")
        assert all(math.isfinite(x) for x in half) and worst < 2e-2


def test_an_overflowing_step_is_skipped_and_the_scale_halved():
    config, train_cfg = model_config("tiny"), train_config("tiny")
    model = TinyGPT(config, train_cfg.seed)
    optimizer = make_optimizer(model, train_cfg)
    scaler = torch.amp.GradScaler("cpu", init_scale=3e38, growth_interval=2)  # loss × scale overflows float32
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randint(0, 256, (train_cfg.batch, config.ctx))
    autocast = RunOptions(precision="fp16").autocast
    train_step(model, optimizer, x, x.roll(-1, 1), train_cfg.gradClip, 1, lambda: autocast(torch.device("cpu")),
               scaler)
    unchanged = all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    print(f"after an overflow: weights unchanged {unchanged}, scale {3e38:.3g} -> {scaler.get_scale():.3g}")
    assert unchanged and scaler.get_scale() == pytest.approx(1.5e38, rel=1e-6)  # the scale is a float32
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    for _ in range(2):
        train_step(model, optimizer, x, x.roll(-1, 1), train_cfg.gradClip, 1, lambda: autocast(torch.device("cpu")),
                   scaler)
    print(f"after 2 clean steps: scale 1024 -> {scaler.get_scale():g}")
    assert scaler.get_scale() == 2048.0


def test_fp16_resumes_exactly_with_its_loss_scale(corpus, tmp_path):
    whole = new_run("tiny", corpus, "cpu", options={"precision": "fp16"}, steps=6, evalEvery=0)
    whole.run(6, progress=False)
    half = new_run("tiny", corpus, "cpu", options={"precision": "fp16"}, steps=6, evalEvery=0)
    half.run(3, tmp_path / "half.tinygpt", progress=False)
    training = tinygpt_file.read_state(tmp_path / "half.tinygpt").header["training"]
    print(f"recorded: precision {training['precision']}, lossScale {training['lossScale']}, "
          f"cleanSteps {training['cleanSteps']}")
    assert training["precision"] == "fp16" and training["lossScale"] > 0 and training["cleanSteps"] == 3
    resumed = resume_run(tmp_path / "half.tinygpt", corpus, "cpu", steps=6)
    resumed.run(6, progress=False)
    got, want = [x for _, x in resumed.loss_history], [x for _, x in whole.loss_history]
    print(f"uninterrupted {want[3:]}\nresumed       {got[3:]}")
    assert got == want
    assert all(np.array_equal(a.detach().numpy(), b.detach().numpy())
               for a, b in zip(resumed.model.parameters(), whole.model.parameters()))
