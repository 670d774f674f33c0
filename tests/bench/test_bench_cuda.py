"""bench/torch_cuda.py (GPU machines only): every step form trains as the eager step does; the
graphed and compiled forms' losses stay within float32 reordering of the eager reference's."""
from __future__ import annotations

import pytest
import torch

from bench.torch_cuda import MODES, cuda_step, fp32_only, preset_batches, static_step

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("mode", [m for m in MODES if m != "eager"])
def test_step_forms_follow_the_eager_reference(mode):
    fp32_only()
    batches = preset_batches("tiny", 12)
    reference = static_step("tiny", batches[:2], compiled=False, graph=False)
    ready = cuda_step("tiny", mode, batches[:2])
    want = [float(v) for v in reference.warmup_losses] + [float(reference.step(x, y)) for x, y in batches[2:]]
    got = [float(v) for v in ready.warmup_losses] + [float(ready.step(x, y)) for x, y in batches[2:]]
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    print(f"{mode}: setup {ready.setup_s:.2f} s, losses {got[0]:.4f} -> {got[-1]:.4f}, max rel diff {worst:.2e}")
    assert worst < 1e-4


def test_eager_is_the_step_tinygpt_train_takes():
    batches = preset_batches("tiny", 3)
    ready = cuda_step("tiny", "eager", batches[:2])
    assert isinstance(ready.step(*batches[2]), float)  # train_step's loss.item(): one host sync per step
