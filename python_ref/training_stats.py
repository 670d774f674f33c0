"""Training, seen: what the page's training view shows every K steps, computed as the reference.

For one training step (full training, or a LoRA fine-tune's adapters):
  - per tensor, the sum of squares of its gradient as the backward left it (before the global-norm clip),
    of its weights before the update, and of the update itself (the weights after minus before);
  - per group of tensors ("embeddings", "block 0", ..., "final LayerNorm"; a fine-tune's adapters are
    grouped by their block), the gradient norm sqrt(sum g^2) and the update-to-weight ratio
    ||dW|| / ||W|| = sqrt(sum dW^2) / sqrt(sum W^2);
and for the weights after the step, the attention entropy of every layer and head on a fixed probe window
(the first ctx bytes of the training text): the mean over the window's queries i of
H_i = -sum_j p_ij ln p_ij, in nats, where p_i is query i's attention over keys 0..i. Uniform attention
gives the largest value the window allows, max_entropy(T) = mean_i ln(i + 1); attention on one key gives 0.

The C++ core (tg_train_step_stats, tg_attention_entropy) and the WebGPU engine (webgpu/training_stats.js)
compute the same from their own step; tests/wasm/test_native_training_stats.py and
tests/webgpu/test_webgpu_training_stats.py hold them to this file within 1e-4. The page groups and
summarises the sums as summarise() does (site/static/js/training_stats.js).
"""
from __future__ import annotations

import math
import re

import numpy as np
import torch

from .look_inside import attention_weights
from .train import train_step

EMBEDDINGS = "embeddings"
FINAL_LAYERNORM = "final LayerNorm"
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def group_of(name: str) -> str:
    """The group a tensor (of the manifest, or of the adapter manifest) is shown in."""
    m = _BLOCK.match(name)
    if m:
        return f"block {m[1]}"
    if name.startswith(("token_embedding", "position_embedding")):
        return EMBEDDINGS
    if name.startswith("ln_f"):
        return FINAL_LAYERNORM
    raise ValueError(f"tensor {name!r} belongs to no group of the training view")


def named_trained(module) -> list[tuple[str, torch.Tensor]]:
    """The tensors a step trains, in (adapter-)manifest order: a LoRA's adapters, else the model's weights."""
    if hasattr(module, "named_adapters"):
        return list(module.named_adapters())
    return list(module.named_parameters())


def train_step_with_stats(module, optimizer, x: torch.Tensor, y: torch.Tensor, grad_clip: float):
    """train_step (the same step, bit for bit), measured: (loss, sums) with sums (n, 3) float64, per trained
    tensor [sum g^2 before the clip, sum W^2 before the update, sum (W_after - W_before)^2]."""
    named = named_trained(module)
    before = [t.detach().clone() for _, t in named]
    grads: list[float] = []

    def keep_grads():
        grads[:] = [float(t.grad.double().square().sum()) if t.grad is not None else 0.0 for _, t in named]

    loss = train_step(module, optimizer, x, y, grad_clip, before_clip=keep_grads)
    sums = np.empty((len(named), 3), np.float64)
    for i, ((_, t), b) in enumerate(zip(named, before)):
        b64 = b.double()
        sums[i] = (grads[i], float(b64.square().sum()), float((t.detach().double() - b64).square().sum()))
    return loss, sums


@torch.no_grad()
def attention_entropy(model, tokens) -> np.ndarray:
    """(L, H) float64: the mean over the window's queries of each head's attention entropy, in nats."""
    p = torch.from_numpy(attention_weights(model, tokens)).double()  # (L,H,T,T), 0 above the diagonal
    return (-torch.xlogy(p, p).sum(-1)).mean(-1).numpy()


def max_entropy(T: int) -> float:
    """The entropy of uniform causal attention over a window of T, averaged over its queries: mean_i ln(i + 1)."""
    return sum(math.log(i + 1) for i in range(T)) / T


def probe_window(corpus_bytes, ctx: int) -> bytes:
    """The training view's probe: the first ctx bytes of the corpus (its training split starts there)."""
    return bytes(np.asarray(corpus_bytes, dtype=np.uint8)[:ctx])


def summarise(names: list[str], sums: np.ndarray, entropy: np.ndarray | None = None, T: int | None = None) -> dict:
    """What the view shows of one measured step: {groups, gradNorm, updateRatio, gradNormTotal} and, given
    the entropy (L, H) of a probe of T bytes, {entropy (L lists of H), maxEntropy}."""
    groups: list[str] = []
    totals: dict[str, np.ndarray] = {}
    for name, row in zip(names, np.asarray(sums, np.float64)):
        g = group_of(name)
        if g not in totals:
            groups.append(g)
            totals[g] = np.zeros(3)
        totals[g] += row
    out = {
        "groups": groups,
        "gradNorm": [math.sqrt(totals[g][0]) for g in groups],
        "updateRatio": [math.sqrt(totals[g][2]) / math.sqrt(totals[g][1]) if totals[g][1] > 0 else None
                        for g in groups],
        "gradNormTotal": math.sqrt(float(np.asarray(sums)[:, 0].sum())),
    }
    if entropy is not None:
        out["entropy"] = np.asarray(entropy, np.float64).tolist()
        out["maxEntropy"] = max_entropy(T)
    return out


def measured_steps(module, optimizer, batches, grad_clip: float, probe: bytes, steps: int, every: int,
                   start: int = 0) -> dict[int, tuple[float, dict]]:
    """Steps start+1 .. start+steps of a run (a TinyGPT with its AdamW, or a LoRA with its adapters' AdamW), on
    `batches` (a BatchStream), measured at every step that is a multiple of `every`, as the page measures them:
    {step: (loss, summary of that step and of the probe's attention entropy after it)}."""
    names = [n for n, _ in named_trained(module)]
    model = getattr(module, "model", module)
    device = next(model.parameters()).device
    out = {}
    for step in range(start + 1, start + steps + 1):
        x, y = (torch.from_numpy(a).to(device) for a in batches.next())
        if step % every:
            train_step(module, optimizer, x, y, grad_clip)
            continue
        loss, sums = train_step_with_stats(module, optimizer, x, y, grad_clip)
        out[step] = (loss, summarise(names, sums, attention_entropy(model, probe), len(probe)))
    return out


def differences(a: dict, b: dict) -> dict[str, tuple[float, float]]:
    """{quantity: (largest |a - b|, largest |a - b| / |b|)} over two summaries (the parity tests' figures)."""
    out = {}
    for key in ("gradNorm", "updateRatio", "gradNormTotal", "entropy", "maxEntropy"):
        if key not in a and key not in b:
            continue
        x, y = np.asarray(a.get(key), np.float64).ravel(), np.asarray(b.get(key), np.float64).ravel()
        if x.size != y.size:
            raise ValueError(f"{key}: {x.size} values against {y.size}")
        d = np.abs(x - y)
        out[key] = (float(d.max(initial=0.0)), float((d / np.maximum(np.abs(y), 1e-30)).max(initial=0.0)))
    return out


def figure(out: str, steps: int = 600, every: int = 10, lrs=(3e-6, 3e-4, 3e-2)) -> dict:
    """The figure of /learn's "Training, seen": the tiny preset on TinyShakespeare from one seed, once per
    learning rate, measured every `every` steps; one column per run (gradient norm, update ratio, attention
    entropy per head), written as a PNG. Returns each run's last summary."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .config import DEFAULT_CORPUS, model_config, train_config
    from .data import BatchStream, Corpus
    from .model import TinyGPT
    from .train import make_optimizer

    config, corpus = model_config("tiny"), Corpus.from_file(DEFAULT_CORPUS)
    probe = probe_window(corpus.data, config.ctx)
    palette = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"]
    fig, axes = plt.subplots(3, len(lrs), figsize=(3.0 * len(lrs), 5.6), sharex=True, squeeze=False)
    last = {}
    for col, lr in enumerate(lrs):
        t = train_config("tiny", lr=lr)
        train, _ = corpus.split(t.valFraction, config.ctx)
        torch.manual_seed(0)
        model = TinyGPT(config, t.seed)
        batches = BatchStream(train, config.ctx, t.batch, t.seed)
        runs = measured_steps(model, make_optimizer(model, t), batches, t.gradClip, probe, steps, every)
        xs = sorted(runs)
        groups = runs[xs[0]][1]["groups"]
        for i, g in enumerate(groups):
            axes[0][col].plot(xs, [runs[s][1]["gradNorm"][i] for s in xs], color=palette[i], lw=1, label=g)
            axes[1][col].plot(xs, [runs[s][1]["updateRatio"][i] for s in xs], color=palette[i], lw=1, label=g)
        for l_ in range(config.nLayer):
            for h in range(config.nHead):
                axes[2][col].plot(xs, [runs[s][1]["entropy"][l_][h] for s in xs], color=palette[h], lw=1,
                                  ls="-" if l_ == 0 else "--", label=f"layer {l_} head {h}")
        axes[1][col].axhline(1e-3, color="grey", ls=":", lw=1)
        axes[2][col].axhline(max_entropy(config.ctx), color="grey", ls=":", lw=1)
        axes[0][col].set_title(f"lr {lr:g}", fontsize=9)
        axes[0][col].set_yscale("log")
        axes[1][col].set_yscale("log")
        axes[2][col].set_ylim(0, max_entropy(config.ctx) * 1.08)
        axes[2][col].set_xlabel("step", fontsize=8)
        last[lr] = runs[xs[-1]][1]
    for row, name in enumerate(("gradient norm", "update / weight", "attention entropy")):
        axes[row][0].set_ylabel(name, fontsize=8)
    axes[0][-1].legend(fontsize=6, loc="upper right")
    for ax in axes.ravel():
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return last


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(figure(sys.argv[1] if len(sys.argv) > 1 else "training-seen.png"), indent=1))
