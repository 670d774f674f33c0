"""python_ref/look_inside.py, the oracle of the look-inside tests, checked against the model itself:
its attention probabilities times v give the attention output the model's fused
scaled_dot_product_attention computes, and its next-byte probabilities follow sample.generate."""
import numpy as np
import pytest
import torch

from python_ref.config import model_config
from python_ref.look_inside import attention_weights, generation_probs, top_bytes
from python_ref.model import TinyGPT
from python_ref.sample import generate

PROMPT = b"ROMEO:\nBut soft, what light\x07"


@torch.no_grad()
def test_attention_weights_reproduce_the_models_attention_output():
    model = TinyGPT(model_config("tiny"), seed=3)
    T, H, C = len(PROMPT), model.config.nHead, model.config.dModel
    seen = {}
    hooks = [block.attn.v_proj.register_forward_hook(lambda m, a, out, layer=layer: seen.__setitem__(("v", layer), out))
             for layer, block in enumerate(model.blocks)]
    hooks += [block.attn.o_proj.register_forward_pre_hook(
                  lambda m, a, layer=layer: seen.__setitem__(("y", layer), a[0]))
              for layer, block in enumerate(model.blocks)]
    model(torch.tensor([list(PROMPT)]))
    for h in hooks:
        h.remove()
    P = attention_weights(model, PROMPT)  # (L,H,T,T)
    diff = 0.0
    for layer in range(len(model.blocks)):
        v = seen[("v", layer)].view(T, H, C // H).transpose(0, 1).numpy()  # (H,T,D)
        y = (P[layer] @ v).transpose(1, 0, 2).reshape(T, C)
        diff = max(diff, float(np.abs(y - seen[("y", layer)][0].numpy()).max()))
    print(f"\nP @ v vs the model's attention output, {len(model.blocks)} layers: max difference {diff:.3g} (bar 1e-6); "
          f"row sums within {float(np.abs(P.sum(-1) - 1).max()):.3g} of 1")
    assert diff < 1e-6
    assert np.all(np.triu(P, 1) == 0) and np.allclose(P.sum(-1), 1, atol=1e-6)


def test_generation_probs_follow_generate_and_top_bytes_sort():
    model = TinyGPT(model_config("tiny"), seed=3)
    steps = generation_probs(model, PROMPT, 40, 0.8, 40, 7)  # past tiny's ctx: the window restarts
    assert bytes(t for t, _ in steps) == generate(model, PROMPT, 40, 0.8, 40, 7)
    assert all(abs(float(p.sum()) - 1) < 1e-5 for _, p in steps)
    probs = np.array([0.1, 0.3, 0.1, 0.5], np.float32)
    assert top_bytes(probs, 3) == [(3, 0.5), (1, pytest.approx(0.3)), (0, pytest.approx(0.1))]

