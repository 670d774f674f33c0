"""Corpus loading, the contiguous train/val split, and batches drawn from the portable data stream."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .prng import batch_offsets


class CorpusError(ValueError):
    """A corpus that cannot be trained on."""


@dataclass
class Corpus:
    name: str
    data: np.ndarray  # (N,) uint8 bytes
    sha256: str

    @classmethod
    def from_bytes(cls, raw: bytes, name: str) -> "Corpus":
        if len(raw) == 0:
            raise CorpusError(f"corpus {name!r} is empty: give a text file with some content")
        return cls(name, np.frombuffer(raw, dtype=np.uint8), hashlib.sha256(raw).hexdigest())

    @classmethod
    def from_file(cls, path: str | Path) -> "Corpus":
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise CorpusError(f"corpus file {str(path)!r} does not exist") from None
        except IsADirectoryError:
            raise CorpusError(f"corpus path {str(path)!r} is a directory, not a text file") from None
        except OSError as e:
            raise CorpusError(f"corpus file {str(path)!r} cannot be read: {e.strerror or e}") from None
        return cls.from_bytes(raw, path.name)

    def identity(self) -> dict:
        """What a checkpoint records of its corpus: never the text itself."""
        return {"name": self.name, "bytes": int(self.data.size), "sha256": self.sha256}

    def split(self, val_fraction: float, ctx: int) -> tuple[np.ndarray, np.ndarray]:
        """First (1 - f) for training, the rest for validation; both must hold a window of ctx+1 bytes."""
        n = int(self.data.size)
        n_val = math.floor(n * val_fraction)
        n_train = n - n_val
        need = ctx + 1
        if n_train < need or n_val < need:
            raise CorpusError(
                f"corpus {self.name!r} has {n} bytes: too short for a context of {ctx} "
                f"(the train split has {n_train} and the val split {n_val} bytes; each needs at least {need}). "
                f"Use a longer text (at least {math.ceil(need / val_fraction)} bytes) or a smaller preset."
            )
        return self.data[:n_train], self.data[n_train:]


class BatchStream:
    """Random windows of the training split; batches_drawn is the whole resumable state."""

    def __init__(self, train: np.ndarray, ctx: int, batch: int, seed: int, batches_drawn: int = 0):
        if int(train.size) < ctx + 1:
            raise CorpusError(f"training split has {train.size} bytes: too short for one window of ctx + 1 = {ctx + 1}")
        self.train, self.ctx, self.batch, self.seed = train, ctx, batch, seed
        self.batches_drawn = batches_drawn
        self.n_starts = int(train.size) - ctx  # window [s, s+ctx] needs s + ctx < n_train

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """x, y: (B,T) int64 with y[b,t] = x[b,t+1] in the corpus."""
        starts = batch_offsets(self.seed, self.batches_drawn, self.batch, self.n_starts)
        self.batches_drawn += 1
        return windows_at(self.train, starts, self.ctx)

    def state(self) -> dict:
        return {"seed": self.seed, "batchesDrawn": self.batches_drawn}


def eval_window_starts(n_val: int, ctx: int, windows: int) -> np.ndarray:
    """K evenly spread window starts in the val split: start_i = i * (n_val - ctx - 1) // (K - 1)."""
    if n_val < ctx + 1:
        raise CorpusError(f"validation split has {n_val} bytes: too short for one window of ctx + 1 = {ctx + 1}")
    k = max(1, min(windows, n_val - ctx))
    span = n_val - ctx - 1
    return np.array([(i * span) // max(k - 1, 1) for i in range(k)], dtype=np.int64)


def windows_at(data: np.ndarray, starts: np.ndarray, ctx: int) -> tuple[np.ndarray, np.ndarray]:
    rows = starts[:, None] + np.arange(ctx + 1)[None, :]
    window = data[rows].astype(np.int64)
    return window[:, :-1], window[:, 1:]
