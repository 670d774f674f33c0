"""Fine-tuning with LoRA: a frozen base model (.tinygpt), adapters trained on a corpus, saved as an
adapter file that resumes exactly (docs/format.md, "LoRA adapter file"), and the merged model.

The recipe is full training's (train.py) with the adapters as the only parameters: the same portable
batch stream (data.py, keyed by the run's seed), the same loss, global-norm clip and AdamW with
presets.json's "training" betas, eps and gradClip; presets.json's "lora" gives the defaults of rank,
alpha, targets and of the lr, weightDecay (0: the adapters are not decayed) and steps. One seed keys
both the data stream and the adapters' init stream (LoRAConfig.seed), as one seed keys a full run's
init and data. The C++ core's LoRA mode (wasm/src/lora.h, tg_create_lora) runs the same step, and
tests/wasm/test_native_lora.py holds the two to each other.

A fine-tune's whole state is the adapters, their AdamW moments, the step and the data stream's
{seed, batchesDrawn}, with the base and the corpus it was made on: the adapter file saved here holds
all of it (the base and the corpus by their hashes), so resuming reproduces the uninterrupted run.
"""
from __future__ import annotations

import datetime as _dt
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from . import tinygpt_file
from .config import ConfigError, TrainConfig, model_config, preset_names, presets_file, sampling_defaults, \
    train_config
from .data import BatchStream, Corpus, CorpusError
from .evaluate import val_windows_loss
from .lora import LoRA, LoRAConfig, TARGETS, attach_adapter, lora_defaults, make_adapter_optimizer, \
    read_adapter, restore_adapter_optimizer, save_adapter
from .sample import generate
from .train import SAVE_SAMPLE_BYTES, SAVE_SAMPLE_PROMPT, TrainingError, _history, _resumed_train_config, \
    _StopAtStepBoundary, check_out_path, extend_corpora, resolve_device, train_step


def parse_targets(text: str | None) -> tuple[str, ...] | None:
    """'q_proj,v_proj' -> ('q_proj', 'v_proj'); 'all' -> every target; None stays None (the default)."""
    if text is None:
        return None
    if text.strip() == "all":
        return TARGETS
    return tuple(t.strip() for t in text.split(",") if t.strip())


def base_batch(meta: dict, config) -> int:
    """The batch a fine-tune of this base takes by default: its preset's, else the one it was trained
    with, else that of the preset of the same dimensions."""
    preset = meta.get("preset")
    if isinstance(preset, str) and preset in preset_names() and model_config(preset) == config:
        return train_config(preset).batch
    training = meta.get("training")
    if isinstance(training, dict) and isinstance(training.get("batch"), int) and training["batch"] >= 1:
        return training["batch"]
    for name in preset_names():
        if model_config(name) == config:
            return train_config(name).batch
    raise ConfigError("the base records no batch and matches no preset: give --batch")


def lora_train_config(batch: int, **overrides) -> TrainConfig:
    """presets.json's training recipe with its "lora" lr, weightDecay and steps, then the overrides."""
    d = lora_defaults()
    values = dict(presets_file()["training"], batch=batch, steps=d["steps"], lr=d["lr"], weightDecay=d["weightDecay"])
    values.update({k: v for k, v in overrides.items() if v is not None})
    return TrainConfig(**values)


@dataclass
class FineTuneRun:
    base_path: str
    base_meta: dict
    train_cfg: TrainConfig
    corpus: Corpus
    lora: LoRA
    optimizer: torch.optim.AdamW
    batches: BatchStream
    val: np.ndarray
    step: int = 0
    loss_history: list = field(default_factory=list)  # [[step, loss]]
    val_history: list = field(default_factory=list)   # [[step, val loss]]
    tokens_per_s: float | None = None
    saved_step: int | None = None
    # the fine-tune's corpora before this run's stretch: [{name, bytes, sha256, fromStep, toStep}]
    corpora: list = field(default_factory=list)
    corpus_from: int = 0

    @property
    def model(self):
        return self.lora.model

    def best_val(self) -> float | None:
        return min((v for _, v in self.val_history), default=None)

    def final_loss(self) -> float | None:
        return self.loss_history[-1][1] if self.loss_history else None

    def val_loss(self) -> float:
        """The training-time validation loss, with the adapters (the hooks run inside the base model)."""
        return val_windows_loss(self.model, self.val, self.train_cfg.evalWindows)

    def base_identity(self) -> dict:
        """What the adapter file says of its base beyond its hashes: for a person and the runs view."""
        meta = self.base_meta
        out = {"name": meta.get("name") if isinstance(meta.get("name"), str) else Path(self.base_path).name,
               "step": meta.get("step")}
        if isinstance(meta.get("preset"), str):
            out["preset"] = meta["preset"]
        return out

    def corpora_now(self) -> list[dict]:
        """Every corpus this fine-tune trained on, with its steps (the header's `corpora`, as a .tinygpt
        records its own): a resumed run continues the last entry."""
        return extend_corpora(self.corpora, self.corpus.identity(), self.corpus_from, self.step)

    def header(self) -> dict:
        h = dict(training=self.train_cfg.to_json(), dataState=self.batches.state(), corpus=self.corpus.identity(),
                 corpora=self.corpora_now(), base=self.base_identity(), lossHistory=self.loss_history,
                 valHistory=self.val_history, finalLoss=self.final_loss(), bestVal=self.best_val())
        for key, as_key in (("corpus", "baseCorpus"), ("corpora", "baseCorpora")):
            if isinstance(self.base_meta.get(key), (dict, list)):
                h[as_key] = self.base_meta[key]
        if isinstance(self.base_meta.get("preset"), str):
            h["preset"] = self.base_meta["preset"]
        return h

    def sample_text(self) -> str:
        s = sampling_defaults()
        text = generate(self.model, SAVE_SAMPLE_PROMPT, SAVE_SAMPLE_BYTES, s["temperature"], s["topK"], s["seed"])
        return text.decode("utf-8", errors="replace")

    def save(self, path: str | Path) -> None:
        """The adapter file with its moments, step, data state and corpus: resumable exactly."""
        save_adapter(path, self.lora, self.optimizer if self.step > 0 else None, step=self.step,
                     sample=self.sample_text(), savedAt=_now(), **self.header())
        self.saved_step = self.step

    def save_merged(self, path: str | Path) -> None:
        """The merged model (save_merged below); the run's own model stays unmerged."""
        save_merged(path, self.lora, self.header(), self.step)

    def run(self, until: int, out: str | Path | None = None, save_every: int = 0,
            merged_out: str | Path | None = None, progress: bool = True) -> None:
        """Train the adapters up to step `until`, evaluating every evalEvery steps and at the end,
        saving the adapter file to `out` (and the merged model to `merged_out` at the end).
        Ctrl-C or SIGTERM stops at the next step boundary and saves, then raises KeyboardInterrupt."""
        if save_every < 0:
            raise ConfigError("--save-every must be >= 0 (0 = only at the end)")
        if save_every and out is None:
            raise ConfigError("--save-every needs --out: where should the adapter file go?")
        check_out_path(out)
        check_out_path(merged_out, "--merged-out")
        device = next(self.model.parameters()).device
        tokens_per_step = self.train_cfg.batch * self.model.config.ctx
        steps_timed, seconds = 0, 0.0
        bar = tqdm(total=until, initial=self.step, desc="finetune", unit="step", file=sys.stderr,
                   disable=not progress, dynamic_ncols=True)
        with bar, _StopAtStepBoundary() as stop:
            while self.step < until and not stop.requested:
                started = time.perf_counter()
                x, y = (torch.from_numpy(a).to(device) for a in self.batches.next())
                loss = train_step(self.lora, self.optimizer, x, y, self.train_cfg.gradClip)
                if not math.isfinite(loss):
                    raise TrainingError(f"the loss became {loss} at step {self.step + 1}; "
                                        f"try a lower --lr (now {self.train_cfg.lr})")
                steps_timed, seconds = steps_timed + 1, seconds + time.perf_counter() - started
                self.tokens_per_s = steps_timed * tokens_per_step / seconds
                self.step += 1
                self.loss_history.append([self.step, loss])
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
                every = self.train_cfg.evalEvery
                if (every and self.step % every == 0) or self.step == until:
                    val = self.val_loss()
                    self.val_history.append([self.step, val])
                    if progress:
                        bar.write(f"step {self.step}: train loss {loss:.4f}, val loss {val:.4f}", file=sys.stderr)
                if out is not None and save_every and self.step % save_every == 0 and self.step < until:
                    self.save(out)
            if out is not None:
                self.save(out)
            if merged_out is not None:
                self.save_merged(merged_out)
            if stop.requested:
                raise KeyboardInterrupt(f"stopped at step {self.step}" + (f"; saved {out}" if out else ""))


MERGED_KEYS = ("preset", "base", "corpus", "corpora", "baseCorpus", "baseCorpora")


def save_merged(path: str | Path, lora: LoRA, header: dict, step: int | None, dtype: str = "float32") -> None:
    """The merged model, W + (alpha/r) B A, as a plain weights-only .tinygpt (step 0) that every level
    loads without LoRA code; its header keeps what the fine-tune's (an adapter file's) says of the base
    and the corpora, and `lora` says what was merged in (docs/format.md)."""
    meta = {k: header[k] for k in MERGED_KEYS if k in header}
    meta["lora"] = dict(lora.config.to_json(), step=step, baseWeightsSha256=lora.base_sha256)
    state = tinygpt_file.CheckpointState(lora.model.config, 0, lora.merged_weights(), header=meta)
    tinygpt_file.write_state(path, state, dtype)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _lora_config(rank, alpha, targets, seed) -> LoRAConfig:
    d = lora_defaults()
    return LoRAConfig(rank=d["rank"] if rank is None else rank, alpha=d["alpha"] if alpha is None else alpha,
                      targets=d["targets"] if targets is None else targets, seed=seed)


def new_finetune(base_path: str | Path, corpus: Corpus, device: str = "auto", rank: int | None = None,
                 alpha: float | None = None, targets=None, **overrides) -> FineTuneRun:
    """A fresh fine-tune of the base file: adapters from the init stream of the run's seed (B = 0, so
    step 0 computes exactly the base), batches from the data stream. overrides: TrainConfig fields
    (None = the default). Everything is checked before any step."""
    base, meta = tinygpt_file.load(base_path)
    batch = overrides.pop("batch", None)
    train_cfg = lora_train_config(base_batch(meta, base.config) if batch is None else batch, **overrides)
    lora_cfg = _lora_config(rank, alpha, targets, train_cfg.seed)
    train, val = corpus.split(train_cfg.valFraction, base.config.ctx)
    lora = LoRA(base.to(resolve_device(device)), lora_cfg)
    return FineTuneRun(str(base_path), meta, train_cfg, corpus, lora, make_adapter_optimizer(lora, train_cfg),
                       BatchStream(train, base.config.ctx, train_cfg.batch, train_cfg.seed), val)


def resume_finetune(adapter_path: str | Path, base_path: str | Path, corpus: Corpus, device: str = "auto",
                    rank: int | None = None, alpha: float | None = None, targets=None,
                    **overrides) -> FineTuneRun:
    """Continue exactly where an adapter file stopped: its adapters, moments, step, data stream and
    histories, on the very base (by hash) and corpus (by SHA-256) it was trained on. Only steps, lr and
    evalEvery may change; other settings and the LoRA config given must equal the file's."""
    adapter = read_adapter(adapter_path)
    header = adapter.header
    step = adapter.step or 0
    if adapter.m is None and step > 0:
        raise ConfigError(f"adapter file at step {step} holds no AdamW moments: it cannot be resumed exactly "
                          f"(save fine-tunes with their optimizer)")
    for name, given, recorded in (("rank", rank, adapter.config.rank), ("alpha", alpha, adapter.config.alpha),
                                  ("targets", None if targets is None else LoRAConfig(1, 1, targets).targets,
                                   adapter.config.targets)):
        if given is not None and given != recorded:
            raise ConfigError(f"--{name} {given} differs from the adapter file's {recorded}: a resumed fine-tune "
                              f"keeps its LoRA config")
    train_cfg = _resumed_train_config(header, overrides)
    if adapter.config.seed != train_cfg.seed:
        raise ConfigError(f"the adapter file's LoRA seed {adapter.config.seed} is not its training seed "
                          f"{train_cfg.seed}: it was not written by a fine-tune that can be resumed")
    data_state = header.get("dataState")
    if not (isinstance(data_state, dict) and isinstance(data_state.get("batchesDrawn"), int)
            and data_state["batchesDrawn"] >= 0 and data_state.get("seed") == train_cfg.seed):
        raise ConfigError(f"adapter file's dataState {data_state!r} is missing or does not match its training seed "
                          f"{train_cfg.seed}: it cannot be resumed exactly")
    recorded = header.get("corpus")
    if not isinstance(recorded, dict) or "sha256" not in recorded:
        raise ConfigError("adapter file does not record its corpus (corpus.sha256): exact resume cannot be checked")
    if recorded["sha256"] != corpus.sha256:
        raise CorpusError(
            f"corpus {corpus.name!r} (sha256 {corpus.sha256[:16]}...) is not the one this fine-tune was trained "
            f"on ({recorded.get('name')!r}, {recorded.get('bytes')} bytes, sha256 {recorded['sha256'][:16]}...); "
            f"pass that file with --corpus"
        )
    base, meta = tinygpt_file.load(base_path)
    lora = attach_adapter(adapter, base.to(resolve_device(device)))  # refuses another base, naming both hashes
    optimizer = make_adapter_optimizer(lora, train_cfg)
    restore_adapter_optimizer(lora, optimizer, adapter)
    train, val = corpus.split(train_cfg.valFraction, base.config.ctx)
    batches = BatchStream(train, base.config.ctx, train_cfg.batch, train_cfg.seed, data_state["batchesDrawn"])
    corpora = header.get("corpora", [])
    if not (isinstance(corpora, list) and all(isinstance(c, dict) for c in corpora)):
        raise ConfigError("adapter file's corpora is not a list of {name, bytes, sha256, fromStep, toStep}")
    return FineTuneRun(str(base_path), meta, train_cfg, corpus, lora, optimizer, batches, val, step,
                       _history(header, "lossHistory"), _history(header, "valHistory"), corpora=corpora,
                       corpus_from=step)


__all__ = ["FineTuneRun", "base_batch", "lora_train_config", "new_finetune", "parse_targets", "resume_finetune",
           "save_merged"]
