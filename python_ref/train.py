"""Training on a text file: portable init and batches, AdamW as docs/determinism.md, exact resume.

A run's whole state is the model, the AdamW moments, the step, and the data stream's
{seed, batchesDrawn}; a .tinygpt checkpoint holds all of it, so resuming reproduces the
uninterrupted run loss for loss.
"""
from __future__ import annotations

import dataclasses
import math
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from . import tinygpt_file
from .config import DEFAULT_CORPUS, ConfigError, TrainConfig, model_config, presets_file, sampling_defaults, \
    train_config
from .data import BatchStream, Corpus, CorpusError
from .evaluate import val_windows_loss
from .model import TinyGPT
from .sample import generate

# The text sample stored in each checkpoint: this many bytes after a newline, presets.json's sampling settings.
SAVE_SAMPLE_BYTES = 120
SAVE_SAMPLE_PROMPT = b"\n"


class TrainingError(RuntimeError):
    """Training cannot go on (the loss became NaN or infinite)."""


def resolve_device(name: str) -> torch.device:
    """'auto' picks cuda, then mps, else cpu; an explicit device that is not there is refused."""
    has_mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' requested but torch sees no CUDA GPU (this torch is "
                          f"{torch.__version__}); use --device cpu or auto")
    if name == "mps" and not has_mps:
        raise ConfigError("device 'mps' requested but this machine has no Apple MPS; use --device cpu or auto")
    if name not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r}; choose cpu, cuda, mps or auto")
    return torch.device(name)


def check_out_path(out: str | Path | None) -> None:
    """Refuse an --out whose directory is missing before training, not after the work is done."""
    if out is not None and not Path(out).resolve().parent.is_dir():
        raise ConfigError(f"cannot save to {out}: its directory does not exist (checked before training)")


def make_optimizer(model: TinyGPT, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on tensors of 2+ dims (embeddings, Linear weights) only; constant lr."""
    params = list(model.parameters())
    return torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weightDecay},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
    )


def train_step(model: TinyGPT, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               grad_clip: float) -> float:
    """One step: forward, backward, global-norm clip, AdamW. x, y: (B,T). Returns the loss before the update."""
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


@dataclass
class TrainingRun:
    preset: str | None
    cfg: TrainConfig
    corpus: Corpus
    model: TinyGPT
    optimizer: torch.optim.AdamW
    batches: BatchStream
    val: np.ndarray
    step: int = 0
    loss_history: list = field(default_factory=list)  # [[step, loss]]
    val_history: list = field(default_factory=list)   # [[step, val loss]]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def best_val(self) -> float | None:
        return min((v for _, v in self.val_history), default=None)

    def final_loss(self) -> float | None:
        return self.loss_history[-1][1] if self.loss_history else None

    def val_loss(self) -> float:
        return val_windows_loss(self.model, self.val, self.cfg.evalWindows)

    def save(self, path: str | Path) -> None:
        s = sampling_defaults()
        text = generate(self.model, SAVE_SAMPLE_PROMPT, SAVE_SAMPLE_BYTES, s["temperature"], s["topK"], s["seed"])
        tinygpt_file.save(
            path, self.model, self.optimizer, step=self.step,
            preset=self.preset, training=self.cfg.to_json(), dataState=self.batches.state(),
            corpus=self.corpus.identity(), lossHistory=self.loss_history, valHistory=self.val_history,
            finalLoss=self.final_loss(), bestVal=self.best_val(),
            sample=text.decode("utf-8", errors="replace"),
        )

    def run(self, until: int, out: str | Path | None = None, save_every: int = 0, progress: bool = True) -> None:
        """Train up to step `until`, evaluating every evalEvery steps and at the end, saving to `out`.

        Ctrl-C stops at the next step boundary and saves (when `out` is set), then raises KeyboardInterrupt.
        """
        if save_every < 0 or self.cfg.evalEvery < 0:
            raise ConfigError("--save-every and --eval-every must be >= 0 (0 = only at the end)")
        if save_every and out is None:
            raise ConfigError("--save-every needs --out: where should the checkpoints go?")
        check_out_path(out)
        bar = tqdm(total=until, initial=self.step, desc="train", unit="step", file=sys.stderr,
                   disable=not progress, dynamic_ncols=True)
        with bar, _StopAtStepBoundary() as stop:
            while self.step < until and not stop.requested:
                x, y = (torch.from_numpy(a).to(self.device) for a in self.batches.next())
                loss = train_step(self.model, self.optimizer, x, y, self.cfg.gradClip)
                if not math.isfinite(loss):
                    raise TrainingError(f"the loss became {loss} at step {self.step + 1}; "
                                        f"try a lower --lr (now {self.cfg.lr})")
                self.step += 1
                self.loss_history.append([self.step, loss])
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
                every = self.cfg.evalEvery
                if (every and self.step % every == 0) or self.step == until:
                    val = self.val_loss()
                    self.val_history.append([self.step, val])
                    if progress:
                        bar.write(f"step {self.step}: train loss {loss:.4f}, val loss {val:.4f}", file=sys.stderr)
                if out is not None and save_every and self.step % save_every == 0 and self.step < until:
                    self.save(out)
            if out is not None:
                self.save(out)
            if stop.requested:
                raise KeyboardInterrupt(f"stopped at step {self.step}" + (f"; saved {out}" if out else ""))


class _StopAtStepBoundary:
    """The first Ctrl-C asks the loop to stop after the current step (never half-way through AdamW)."""

    def __init__(self):
        self.requested = False
        self.previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def new_run(preset: str | None = None, corpus: Corpus | None = None, device: str = "auto", **overrides) -> TrainingRun:
    """A fresh run: weights from the portable init stream, batches from the portable data stream."""
    preset = preset or presets_file()["defaultPreset"]
    config = model_config(preset)
    cfg = train_config(preset, **overrides)
    corpus = corpus if corpus is not None else Corpus.from_file(DEFAULT_CORPUS)
    train, val = corpus.split(cfg.valFraction, config.ctx)
    model = TinyGPT(config, cfg.seed).to(resolve_device(device))
    return TrainingRun(preset, cfg, corpus, model, make_optimizer(model, cfg),
                       BatchStream(train, config.ctx, cfg.batch, cfg.seed), val)


# What a resumed run may change: how far to go, how fast, how often to evaluate. batch and seed
# define the data stream, so changing them would silently break exact resume.
RESUME_MAY_CHANGE = ("steps", "lr", "evalEvery")


def resume_run(path: str | Path, corpus: Corpus | None = None, device: str = "auto",
               preset: str | None = None, **overrides) -> TrainingRun:
    """Continue exactly where a checkpoint stopped (weights, AdamW moments, step, data stream, histories)."""
    model, meta = tinygpt_file.load(path, resolve_device(device))
    state = meta["state"]
    if preset is not None and meta.get("preset") not in (None, preset):
        raise ConfigError(f"--preset {preset} but the checkpoint is a {meta['preset']!r} model")
    cfg = _resumed_train_config(meta, overrides)
    data_state = meta.get("dataState")
    if not (isinstance(data_state, dict) and isinstance(data_state.get("batchesDrawn"), int)
            and data_state["batchesDrawn"] >= 0 and data_state.get("seed") == cfg.seed):
        raise ConfigError(f"checkpoint's dataState {data_state!r} is missing or does not match its "
                          f"training seed {cfg.seed}: it cannot be resumed exactly")
    if state.m is None and state.step > 0:
        raise ConfigError(f"checkpoint at step {state.step} holds no AdamW moments: it cannot be resumed exactly")
    corpus = corpus if corpus is not None else Corpus.from_file(DEFAULT_CORPUS)
    recorded = meta.get("corpus")
    if not isinstance(recorded, dict) or "sha256" not in recorded:
        raise ConfigError("checkpoint does not record its corpus (corpus.sha256): exact resume cannot be checked")
    if recorded["sha256"] != corpus.sha256:
        raise CorpusError(
            f"corpus {corpus.name!r} (sha256 {corpus.sha256[:16]}...) is not the one this checkpoint was "
            f"trained on ({recorded.get('name')!r}, {recorded.get('bytes')} bytes, sha256 "
            f"{recorded['sha256'][:16]}...); pass that file with --corpus"
        )
    train, val = corpus.split(cfg.valFraction, model.config.ctx)
    optimizer = make_optimizer(model, cfg)
    tinygpt_file.restore_optimizer(model, optimizer, state)
    batches = BatchStream(train, model.config.ctx, cfg.batch, cfg.seed, data_state["batchesDrawn"])
    return TrainingRun(meta.get("preset"), cfg, corpus, model, optimizer, batches, val, state.step,
                       _history(meta, "lossHistory"), _history(meta, "valHistory"))


def _resumed_train_config(meta: dict, overrides: dict) -> TrainConfig:
    training = meta.get("training")
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    if not isinstance(training, dict) or any(n not in training for n in names):
        missing = names if not isinstance(training, dict) else [n for n in names if n not in training]
        raise ConfigError(f"checkpoint's training settings lack {', '.join(missing)}: it cannot be resumed exactly")
    values = {n: training[n] for n in names}
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in RESUME_MAY_CHANGE and value != values[key]:
            raise ConfigError(f"--{key} {value} differs from the checkpoint's {values[key]}: a resumed run keeps "
                              f"its {key} (it defines the batch sequence); only steps, lr and eval-every may change")
        values[key] = value
    try:
        return TrainConfig(**values)
    except TypeError as e:
        raise ConfigError(f"checkpoint's training settings are invalid: {e}") from None


def _history(meta: dict, key: str) -> list:
    h = meta.get(key, [])
    if not isinstance(h, list) or not all(isinstance(e, list) and len(e) == 2 for e in h):
        raise ConfigError(f"checkpoint's {key} is not a list of [step, loss] pairs")
    return [list(e) for e in h]

