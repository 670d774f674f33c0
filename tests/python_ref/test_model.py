"""python_ref/model.py: initial loss, float64 gradients, manifest order, KV cache, and an independent
numpy forward written from the spec (so the PyTorch oracle is itself checked against the words)."""
import math

import numpy as np
import pytest
import torch
from torch.func import functional_call, vmap

from python_ref.config import DEFAULT_CORPUS, ModelConfig, init_std, model_config
from python_ref.data import Corpus, windows_at
from python_ref.model import TinyGPT, initial_tensor_values, manifest

MICRO = ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=4)


def test_module_order_and_shapes_equal_the_manifest():
    for config in (MICRO, model_config("tiny"), model_config("small")):
        model = TinyGPT(config, seed=None)
        got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
        assert got == manifest(config)
        assert list(model.state_dict()) == [n for n, _ in manifest(config)]


def test_seeded_init_equals_the_portable_init_stream_and_rules():
    config = model_config("tiny")
    model = TinyGPT(config, seed=5)
    params = dict(model.named_parameters())
    std, L = init_std(), config.nLayer
    for name, values in initial_tensor_values(config, 5):
        assert np.array_equal(params[name].detach().numpy().view(np.uint32), values.view(np.uint32)), name
        if name.endswith(".bias"):
            assert not values.any(), name
        elif ".ln" in name or name.startswith("ln_f"):
            assert (values == 1).all(), name
        else:
            want = std / math.sqrt(2 * L) if name.endswith(("o_proj.weight", "fc_out.weight")) else std
            assert abs(values.std() / want - 1) < 0.1, (name, values.std(), want)


def test_initial_loss_is_ln256_for_random_targets():
    config = model_config("tiny")
    model = TinyGPT(config, seed=0)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(0.1, config.ctx)
    rng = np.random.default_rng(0)
    x, _ = windows_at(train, rng.integers(0, train.size - config.ctx, 32), config.ctx)
    # random targets: with tied embeddings, predicting the input byte itself is slightly favoured
    targets = rng.integers(0, 256, x.shape)
    with torch.no_grad():
        _, loss = model(torch.from_numpy(x), torch.from_numpy(targets))
    diff = abs(loss.item() - math.log(256))
    print(f"initial loss {loss.item():.5f}, ln 256 = {math.log(256):.5f}, |diff| = {diff:.5f}")
    assert diff < 0.05


def _micro_problem(seed=0):
    torch.manual_seed(seed)
    model = TinyGPT(MICRO, seed=seed).double()
    # non-trivial LayerNorm gains and biases so that their gradients are exercised too
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    idx = torch.randint(0, 256, (2, MICRO.ctx))
    targets = torch.randint(0, 256, (2, MICRO.ctx))
    probe = torch.randn(2, MICRO.ctx, 256, dtype=torch.float64)  # weights every logit into the scalar

    names = [n for n, _ in model.named_parameters()]

    def scalar(*flat_params):
        logits, loss = functional_call(model, dict(zip(names, flat_params)), (idx, targets))
        return loss + (logits * probe).sum() * 1e-2

    return model, scalar


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # vmap falls back to a loop for SDPA
def test_float64_gradcheck_whole_model():
    model, scalar = _micro_problem()
    params = tuple(p.detach().clone().requires_grad_(True) for p in model.parameters())
    assert torch.autograd.gradcheck(scalar, params, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)

    # Full check of every parameter: central differences, all perturbations evaluated with vmap.
    shapes, sizes = [p.shape for p in params], [p.numel() for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def of_flat(v):
        return scalar(*(c.view(s) for c, s in zip(v.split(sizes), shapes)))

    leaf = flat.clone().requires_grad_(True)
    analytic, = torch.autograd.grad(of_flat(leaf), leaf)
    eps, numeric = 1e-6, torch.empty_like(flat)
    with torch.no_grad():
        for start in range(0, flat.numel(), 512):
            rows = torch.arange(start, min(flat.numel(), start + 512))
            bump = torch.zeros(len(rows), flat.numel(), dtype=flat.dtype)
            bump[torch.arange(len(rows)), rows] = eps
            numeric[rows] = (vmap(of_flat)(flat + bump) - vmap(of_flat)(flat - bump)) / (2 * eps)
    worst = (analytic - numeric).abs().max().item()
    print(f"gradcheck over {flat.numel()} float64 parameters: max |autograd - central difference| = {worst:.3e}")
    assert worst < 1e-7


@pytest.mark.parametrize("chunks", [[1] * 32, [5, 1, 1, 9, 16], [32]])
def test_kv_cache_logits_equal_full_forward(chunks):
    config = model_config("tiny")
    model = TinyGPT(config, seed=1)
    idx = torch.randint(0, 256, (3, config.ctx), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = model(idx)
        caches = [{} for _ in range(config.nLayer)]
        parts, pos = [], 0
        for n in chunks:
            logits, _ = model(idx[:, pos:pos + n], caches=caches, pos_offset=pos)
            parts.append(logits)
            pos += n
    cached = torch.cat(parts, dim=1)
    diff = (cached - full).abs().max().item()
    print(f"KV cache chunks {chunks[:5]}...: max |cached - full| logits = {diff:.3e}")
    assert diff < 1e-5


def test_context_overflow_is_refused():
    model = TinyGPT(MICRO, seed=0)
    with pytest.raises(ValueError, match="exceeds the context of 4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds the context"):
        model(torch.zeros(1, 2, dtype=torch.long), caches=[{}], pos_offset=3)
    caches = [{}]
    model(torch.zeros(1, 2, dtype=torch.long), caches=caches)
    with pytest.raises(ValueError, match="pos_offset 1 differs from the 2 positions held in the KV cache"):
        model(torch.zeros(1, 1, dtype=torch.long), caches=caches, pos_offset=1)


def numpy_forward(weights: dict, config: ModelConfig, idx: np.ndarray) -> np.ndarray:
    """The model as docs/format.md and issue 2 describe it, in float64 numpy, independent of torch."""
    W = {k: v.astype(np.float64) for k, v in weights.items()}
    B, T = idx.shape
    C, H = config.dModel, config.nHead
    D = C // H

    def layernorm(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + config.layerNormEps) * g + b

    def linear(x, name):  # weight [out, in]: y[o] = sum_i W[o, i] x[i] + b[o]
        return x @ W[name + ".weight"].T + W[name + ".bias"]

    x = W["token_embedding.weight"][idx] + W["position_embedding.weight"][:T]
    for i in range(config.nLayer):
        p = f"blocks.{i}."
        h = layernorm(x, W[p + "ln1.weight"], W[p + "ln1.bias"])
        q, k, v = (linear(h, p + f"attn.{n}_proj").reshape(B, T, H, D).transpose(0, 2, 1, 3) for n in "qkv")
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)
        att = np.where(np.tril(np.ones((T, T), bool)), att, -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + linear(y, p + "attn.o_proj")
        h = linear(layernorm(x, W[p + "ln2.weight"], W[p + "ln2.bias"]), p + "mlp.fc_in")
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
        x = x + linear(h, p + "mlp.fc_out")
    x = layernorm(x, W["ln_f.weight"], W["ln_f.bias"])
    return x @ W["token_embedding.weight"].T


def test_torch_model_equals_the_spec_written_in_numpy():
    config = ModelConfig(nLayer=2, nHead=3, dModel=12, ctx=8)
    model = TinyGPT(config, seed=3)
    rng = np.random.default_rng(3)
    with torch.no_grad():  # perturb everything so that biases and gains matter
        for p in model.parameters():
            p.add_(torch.from_numpy(rng.normal(0, 0.1, p.shape).astype(np.float32)))
    idx = rng.integers(0, 256, (2, config.ctx))
    weights = {n: p.detach().numpy() for n, p in model.named_parameters()}
    with torch.no_grad():
        logits, _ = model(torch.from_numpy(idx))
    diff = np.abs(logits.numpy() - numpy_forward(weights, config, idx)).max()
    print(f"torch float32 vs numpy float64 spec forward: max |diff| = {diff:.3e}")
    assert diff < 1e-4
