"""Loss and bits per byte of a model: on a whole file, on the val split, on the training-time val windows.

Tokens are bytes, so bits per byte is the mean cross-entropy in nats divided by ln 2.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .config import ConfigError, presets_file
from .data import Corpus, CorpusError, eval_window_starts, windows_at
from .model import TinyGPT

# Rows per forward pass while evaluating: bounds memory for the large presets, changes no result.
EVAL_ROWS = 16


@dataclass
class EvalResult:
    what: str       # "file", "val split" or "val windows"
    name: str
    positions: int  # predicted bytes the mean is over
    loss: float     # mean cross-entropy, nats
    bpb: float      # loss / ln 2

    def to_json(self) -> dict:
        return asdict(self)


def bits_per_byte(loss: float) -> float:
    return loss / math.log(2)


@torch.no_grad()
def summed_loss(model: TinyGPT, x: np.ndarray, y: np.ndarray) -> float:
    """Sum of cross-entropy over every position of x, y: (rows, T) int64, T <= ctx."""
    device = next(model.parameters()).device
    total = 0.0
    for i in range(0, x.shape[0], EVAL_ROWS):
        xb = torch.from_numpy(x[i:i + EVAL_ROWS]).to(device)
        yb = torch.from_numpy(y[i:i + EVAL_ROWS]).to(device)
        logits, _ = model(xb)  # (rows,T,V)
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(), yb.reshape(-1),
                                 reduction="sum").item()
    return total


def val_windows_loss(model: TinyGPT, val: np.ndarray, eval_windows: int) -> float:
    """The training-time validation loss of docs/determinism.md: mean over K evenly spread windows."""
    ctx = model.config.ctx
    starts = eval_window_starts(int(val.size), ctx, eval_windows)
    x, y = windows_at(val, starts, ctx)
    return summed_loss(model, x, y) / x.size


def covering_loss(model: TinyGPT, data: np.ndarray) -> tuple[float, int]:
    """Mean loss over every byte after the first: non-overlapping windows of ctx, the last one shorter."""
    n = int(data.size)
    if n < 2:
        raise CorpusError(f"{n} bytes: evaluation needs at least 2 (one to read, one to predict)")
    ctx = model.config.ctx
    full = (n - 1) // ctx
    total = 0.0
    if full:
        x, y = windows_at(data, np.arange(full, dtype=np.int64) * ctx, ctx)
        total += summed_loss(model, x, y)
    tail = (n - 1) - full * ctx
    if tail:
        x, y = windows_at(data, np.array([full * ctx], dtype=np.int64), tail)
        total += summed_loss(model, x, y)
    return total / (n - 1), n - 1


def evaluate_file(model: TinyGPT, path: str | Path) -> EvalResult:
    corpus = Corpus.from_file(path)
    if corpus.data.size < 2:
        raise CorpusError(f"{corpus.name!r} has {corpus.data.size} byte: evaluation needs at least 2 "
                          "(one to read, one to predict)")
    loss, positions = covering_loss(model, corpus.data)
    return EvalResult("file", corpus.name, positions, loss, bits_per_byte(loss))


def evaluate_val(model: TinyGPT, corpus: Corpus, val_fraction: float, eval_windows: int) -> list[EvalResult]:
    """The whole val split (covered by windows) and the training-time val windows."""
    _, val = corpus.split(val_fraction, model.config.ctx)
    loss, positions = covering_loss(model, val)
    windows = val_windows_loss(model, val, eval_windows)
    k = eval_window_starts(int(val.size), model.config.ctx, eval_windows).size
    return [
        EvalResult("val split", corpus.name, positions, loss, bits_per_byte(loss)),
        EvalResult("val windows", corpus.name, k * model.config.ctx, windows, bits_per_byte(windows)),
    ]


def split_settings(meta: dict) -> tuple[float, int]:
    """valFraction and evalWindows the checkpoint was trained with, else the presets.json defaults."""
    training = meta.get("training")
    defaults = presets_file()["training"]
    if not isinstance(training, dict):
        return defaults["valFraction"], defaults["evalWindows"]
    val_fraction = training.get("valFraction", defaults["valFraction"])
    eval_windows = training.get("evalWindows", defaults["evalWindows"])
    if not (isinstance(val_fraction, (int, float)) and 0 < val_fraction < 1):
        raise ConfigError(f"checkpoint's valFraction {val_fraction!r} is not in (0, 1)")
    if not (isinstance(eval_windows, int) and eval_windows > 0):
        raise ConfigError(f"checkpoint's evalWindows {eval_windows!r} is not a positive integer")
    return val_fraction, eval_windows
