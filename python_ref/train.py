"""Training on a text file: portable init and batches, AdamW as docs/determinism.md, exact resume.

A run's whole state is the model, the AdamW moments, the step, and the data stream's
{seed, batchesDrawn}; a .tinygpt checkpoint holds all of it, so resuming reproduces the
uninterrupted run loss for loss. Under torchrun each rank trains on its shard of the same global
batch (python_ref/distributed.py), so the state stays global and resumes at any world size.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from . import tinygpt_file
from .config import DEFAULT_CORPUS, ConfigError, TrainConfig, model_config, presets_file, sampling_defaults, \
    train_config
from .data import BatchStream, Corpus, CorpusError
from .distributed import Distributed
from .evaluate import val_windows_loss
from .model import TinyGPT
from .safe_files import check_output
from .sample import generate
from .sharding import gather_state, is_sharded, restore_sharded_optimizer, shard_model

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


def check_out_path(out: str | Path | None, option: str = "--out") -> None:
    """Refuse an output that cannot be written before training, not after the work is done (safe_files)."""
    if out is not None:
        check_output(option, out)


def make_optimizer(model: TinyGPT, train_cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on tensors of 2+ dims (embeddings, Linear weights) only; constant lr."""
    params = list(model.parameters())
    return torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": float(train_cfg.weightDecay)},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        # float(): JSON has one kind of number, so a checkpoint's beta1 of 0 reads as the int 0 (header_checks)
        lr=float(train_cfg.lr), betas=(float(train_cfg.beta1), float(train_cfg.beta2)), eps=float(train_cfg.eps),
    )


LR_SCHEDULES = ("none", "cosine")
PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class RunOptions:
    """Trainer options beyond the portable recipe, all off by default: the browser engines have none of them.

    gradAccum splits each process's rows into that many equal contiguous micro-batches (one backward
    each, gradients summed to the mean over all rows); lrSchedule/warmupSteps scale the lr per step.
    """
    gradAccum: int = 1
    lrSchedule: str = "none"
    warmupSteps: int = 0
    precision: str = "fp32"
    compile: bool = False
    fsdp: bool = False

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown --precision {self.precision!r}; choose {', '.join(PRECISIONS)}")
        if not (isinstance(self.gradAccum, int) and self.gradAccum >= 1):
            raise ConfigError(f"--grad-accum must be a positive integer, got {self.gradAccum!r}")
        if self.lrSchedule not in LR_SCHEDULES:
            raise ConfigError(f"unknown --lr-schedule {self.lrSchedule!r}; choose {' or '.join(LR_SCHEDULES)}")
        if not (isinstance(self.warmupSteps, int) and self.warmupSteps >= 0):
            raise ConfigError(f"--warmup-steps must be a non-negative integer, got {self.warmupSteps!r}")

    @classmethod
    def given(cls, recorded: dict | None = None, **values) -> "RunOptions":
        """Options from the command line (None: not given), over a resumed checkpoint's recorded schedule and
        precision (a resumed fp16 run goes on in fp16, its loss scale where it stood)."""
        base = {k: v for k, v in (recorded or {}).items() if k in ("lrSchedule", "warmupSteps", "precision")}
        return cls(**{**base, **{k: v for k, v in values.items() if v is not None}})

    def recorded(self) -> dict:
        """The options that differ from the default: what a checkpoint's `training` header records."""
        default = RunOptions()
        return {k: v for k, v in dataclasses.asdict(self).items() if v != getattr(default, k)}

    def lr_multiplier(self, step: int, total_steps: int) -> float:
        """Factor on lr for the update from `step` to step + 1: linear warmup, then constant or cosine to 0."""
        if step < self.warmupSteps:
            return (step + 1) / self.warmupSteps
        if self.lrSchedule == "cosine":
            progress = (step - self.warmupSteps) / max(1, total_steps - self.warmupSteps)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    def autocast(self, device: torch.device):
        """The forward pass in bf16 or fp16 (torch.autocast: matmuls in half precision, reductions such as
        LayerNorm, softmax and cross-entropy in fp32); fp32 stays the parity oracle of the fp32 engines."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        if device.type not in ("cuda", "cpu"):
            raise ConfigError(f"--precision {self.precision} is autocast on CUDA or the CPU; this run is on "
                              f"{device.type}")
        return torch.autocast(device.type, dtype=torch.bfloat16 if self.bf16 else torch.float16)

    def loss_scaler(self, device: torch.device, recorded: dict | None = None):
        """fp16's dynamic loss scale (presets.json "mixedPrecision"): the loss is multiplied by the scale before
        the backward; a step whose gradients overflow is skipped and the scale halved, and after growthInterval
        clean steps it doubles. None for fp32 and bf16, whose range needs none. `recorded`: a checkpoint's
        {lossScale, cleanSteps}, so a resumed run scales as the uninterrupted one would."""
        if self.precision != "fp16":
            return None
        mp = presets_file()["mixedPrecision"]
        scaler = torch.amp.GradScaler(device.type, init_scale=float(mp["initialLossScale"]),
                                      growth_interval=int(mp["growthInterval"]))
        if recorded and "lossScale" in recorded:
            scaler.load_state_dict({"scale": float(recorded["lossScale"]), "growth_factor": 2.0,
                                    "backoff_factor": 0.5, "growth_interval": int(mp["growthInterval"]),
                                    "_growth_tracker": int(recorded.get("cleanSteps", 0))})
        return scaler


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               grad_clip: float, micro_batches: int = 1, autocast=contextlib.nullcontext, scaler=None,
               before_clip=None) -> float:
    """One step: forward and backward, global-norm clip, AdamW. x, y: (B,T). Returns the loss before the update.

    With micro_batches K the rows are split into K equal contiguous slices, each loss scaled by 1/K, so
    the summed gradient is that of the mean over all rows; under DDP or FSDP only the last backward
    reduces over ranks. before_clip(): called with the gradients as the backward left them, before the
    clip (training_stats.py reads them there).
    """
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i, (xm, ym) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches))):
        with _gradient_sync(model, i == micro_batches - 1):
            with autocast():
                _, loss = model(xm, ym)
            part = loss / micro_batches
            (scaler.scale(part) if scaler else part).backward()
        total += loss.item()
    if scaler:  # fp16: unscale before clipping; a step with inf/NaN gradients is skipped and the scale halved
        scaler.unscale_(optimizer)
    if before_clip is not None:
        before_clip()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return total / micro_batches


def _gradient_sync(model: torch.nn.Module, last_micro_batch: bool):
    """No gradient reduction for all but the last micro-batch: one all-reduce (DDP) or reduce-scatter
    (FSDP) per step, not per micro-batch."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel) and not last_micro_batch:
        return model.no_sync()
    sharded = getattr(model, "_orig_mod", model)  # under torch.compile, the FSDP module is inside
    if is_sharded(sharded):
        sharded.set_requires_gradient_sync(last_micro_batch)
    return contextlib.nullcontext()


@dataclass
class TrainingRun:
    preset: str | None
    train_cfg: TrainConfig
    corpus: Corpus
    model: TinyGPT
    optimizer: torch.optim.AdamW
    batches: BatchStream
    val: np.ndarray
    step: int = 0
    loss_history: list = field(default_factory=list)  # [[step, loss]]
    val_history: list = field(default_factory=list)   # [[step, val loss]]
    dist: Distributed = field(default_factory=Distributed)
    options: RunOptions = field(default_factory=RunOptions)
    tokens_per_s: float | None = None  # training throughput of the last run(), all ranks together
    scaler: object = None  # fp16's loss scaler (RunOptions.loss_scaler), kept across run() calls
    saved_step: int | None = None  # the step of the last checkpoint this run wrote
    # every corpus before this run's stretch: [{name, bytes, sha256, fromStep, toStep}] (the header's `corpora`)
    corpora: list = field(default_factory=list)
    corpus_from: int = 0  # the step this run's stretch on `corpus` began at

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def corpora_now(self) -> list[dict]:
        """Every corpus this model trained on (the header's `corpora`), this run's stretch included."""
        return extend_corpora(self.corpora, self.corpus.identity(), self.corpus_from, self.step)

    def best_val(self) -> float | None:
        return min((v for _, v in self.val_history), default=None)

    def final_loss(self) -> float | None:
        return self.loss_history[-1][1] if self.loss_history else None

    def val_loss(self) -> float:
        return val_windows_loss(self.model, self.val, self.train_cfg.evalWindows)

    def training_header(self) -> dict:
        """The recipe, plus run metadata (world size, rows per rank) and the options that were used."""
        run = {"worldSize": self.dist.world_size, "rankBatch": self.train_cfg.batch // self.dist.world_size}
        if self.scaler is not None:  # fp16: where the loss scale stands, for an exact resume
            run.update(lossScale=float(self.scaler.get_scale()),
                       cleanSteps=int(self.scaler.state_dict()["_growth_tracker"]))
        return {**self.train_cfg.to_json(), **run, **self.options.recorded()}

    def save(self, path: str | Path) -> None:
        """Write the checkpoint. Under FSDP every rank must call it (the tensors are gathered
        collectively) and rank 0 alone writes the same full file as an unsharded run."""
        model, optimizer = self.model, self.optimizer
        if is_sharded(model):
            model, optimizer = self._gathered_copy()
            if model is None:
                return
        s = sampling_defaults()
        text = generate(model, SAVE_SAMPLE_PROMPT, SAVE_SAMPLE_BYTES, s["temperature"], s["topK"], s["seed"])
        tinygpt_file.save(
            path, model, optimizer, step=self.step,
            preset=self.preset, training=self.training_header(), dataState=self.batches.state(),
            corpus=self.corpus.identity(), corpora=self.corpora_now(), lossHistory=self.loss_history,
            valHistory=self.val_history,
            finalLoss=self.final_loss(), bestVal=self.best_val(),
            sample=text.decode("utf-8", errors="replace"),
        )

    def _gathered_copy(self) -> tuple[TinyGPT | None, torch.optim.AdamW | None]:
        """An unsharded CPU model and AdamW with the run's full state, on rank 0 (None elsewhere)."""
        weights, m, v, step = gather_state(self.model, self.optimizer)
        if not self.dist.is_main:
            return None, None
        def numpy(tensors):
            return None if tensors is None else {n: t.numpy() for n, t in tensors.items()}
        state = tinygpt_file.CheckpointState(self.model.config, step, numpy(weights), numpy(m), numpy(v))
        model = tinygpt_file.model_from_state(state)
        optimizer = make_optimizer(model, self.train_cfg)
        tinygpt_file.restore_optimizer(model, optimizer, state)
        return model, optimizer

    def save_on_rank0(self, path: str | Path) -> None:
        """Rank 0 writes (atomically, through tinygpt_file); the other ranks wait until the file is there."""
        if self.dist.is_main or is_sharded(self.model):
            self.save(path)
        self.dist.barrier()
        self.saved_step = self.step

    def run(self, until: int, out: str | Path | None = None, save_every: int = 0, progress: bool = True) -> None:
        """Train up to step `until`, evaluating every evalEvery steps and at the end, saving to `out`.

        Ctrl-C or SIGTERM stops at the next step boundary (every rank at the same one) and saves (when
        `out` is set), then raises KeyboardInterrupt.
        """
        if save_every < 0 or self.train_cfg.evalEvery < 0:
            raise ConfigError("--save-every and --eval-every must be >= 0 (0 = only at the end)")
        if save_every and out is None:
            raise ConfigError("--save-every needs --out: where should the checkpoints go?")
        check_out_path(out)
        rows = self.dist.rank_rows(self.train_cfg.batch, self.options.gradAccum)
        autocast = functools.partial(self.options.autocast, self.device)
        autocast()  # refuses a half precision the device cannot autocast, before any step
        if self.scaler is None:
            self.scaler = self.options.loss_scaler(self.device)
        model = torch.compile(self.model) if self.options.compile else self.model
        step_model = model if is_sharded(self.model) else self.dist.wrap(model)
        progress = progress and self.dist.is_main
        tokens_per_step = self.train_cfg.batch * self.model.config.ctx
        steps_timed, seconds = 0, 0.0
        bar = tqdm(total=until, initial=self.step, desc="train", unit="step", file=sys.stderr,
                   disable=not progress, dynamic_ncols=True)
        stopping = False
        with bar, _StopAtStepBoundary(repeat_stops_now=not self.dist.active) as stop:
            while self.step < until and not stopping:
                started = time.perf_counter()
                x, y = (torch.from_numpy(a[rows]).to(self.device) for a in self.batches.next())
                for group in self.optimizer.param_groups:
                    group["lr"] = self.train_cfg.lr * self.options.lr_multiplier(self.step, self.train_cfg.steps)
                loss = train_step(step_model, self.optimizer, x, y, self.train_cfg.gradClip, self.options.gradAccum,
                                  autocast, self.scaler)
                loss, stopping = self.dist.agree(loss, stop.requested)
                if not math.isfinite(loss):
                    raise TrainingError(f"the loss became {loss} at step {self.step + 1}; "
                                        f"try a lower --lr (now {self.train_cfg.lr})")
                steps_timed, seconds = steps_timed + 1, seconds + time.perf_counter() - started
                self.tokens_per_s = steps_timed * tokens_per_step / seconds
                self.step += 1
                self.loss_history.append([self.step, loss])
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{self.tokens_per_s:,.0f}", refresh=False)
                every = self.train_cfg.evalEvery
                if (every and self.step % every == 0) or self.step == until:
                    val = self.val_loss()  # every rank evaluates the same windows: the same number everywhere
                    self.val_history.append([self.step, val])
                    if progress:
                        bar.write(f"step {self.step}: train loss {loss:.4f}, val loss {val:.4f}, "
                                  f"{self.tokens_per_s:,.0f} tokens/s", file=sys.stderr)
                if out is not None and save_every and self.step % save_every == 0 and self.step < until:
                    self.save_on_rank0(out)
            if out is not None:
                self.save_on_rank0(out)
            if stopping or stop.requested:
                raise KeyboardInterrupt(f"stopped at step {self.step}" + (f"; saved {out}" if out else ""))


class _StopAtStepBoundary:
    """The first Ctrl-C or SIGTERM asks the loop to stop after the current step (never half-way through AdamW).

    Alone, a second one stops at once. Under torchrun a worker may get the same Ctrl-C twice (from the
    terminal and forwarded by torchrun), so repeats are ignored there: torchrun kills workers that overstay.
    """
    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, repeat_stops_now: bool = True):
        self.requested = False
        self.repeat_stops_now = repeat_stops_now
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum, frame):
        if self.requested and self.repeat_stops_now:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        return False


def new_run(preset: str | None = None, corpus: Corpus | None = None, device: str = "auto",
            dist: Distributed | None = None, options: dict | None = None, **overrides) -> TrainingRun:
    """A fresh run: weights from the portable init stream, batches from the portable data stream.

    With `dist` (a torchrun rank) the model goes to that rank's device and `device` is ignored.
    `options`: RunOptions fields (None = not given, the default).
    """
    preset = preset or presets_file()["defaultPreset"]
    config = model_config(preset)
    train_cfg = train_config(preset, **overrides)
    corpus = corpus if corpus is not None else Corpus.from_file(DEFAULT_CORPUS)
    train, val = corpus.split(train_cfg.valFraction, config.ctx)
    dist = dist or Distributed(device=resolve_device(device))
    run_options = RunOptions.given(**(options or {}))
    model = _placed(TinyGPT(config, train_cfg.seed), dist, run_options)
    return TrainingRun(preset, train_cfg, corpus, model, make_optimizer(model, train_cfg),
                       BatchStream(train, config.ctx, train_cfg.batch, train_cfg.seed), val,
                       dist=dist, options=run_options)


def _placed(model: TinyGPT, dist: Distributed, options: RunOptions) -> TinyGPT:
    """The CPU-built model on this rank's device: whole, or (FSDP) only this rank's shard of it."""
    if not options.fsdp:
        return model.to(dist.device)
    if not dist.active:
        raise ConfigError("--fsdp shards the model over torchrun's ranks: run it under torchrun or with --nproc N")
    return shard_model(model, dist.device, dist.world_size)


# What a resumed run may change: how far to go, how fast, how often to evaluate. batch and seed
# define the data stream, so changing them would silently break exact resume.
RESUME_MAY_CHANGE = ("steps", "lr", "evalEvery")


def resume_run(path: str | Path, corpus: Corpus | None = None, device: str = "auto",
               preset: str | None = None, dist: Distributed | None = None, options: dict | None = None,
               **overrides) -> TrainingRun:
    """Continue exactly where a checkpoint stopped (weights, AdamW moments, step, data stream, histories).

    The data state is global, so any world size resumes it. `options` (RunOptions fields, None = not
    given) override the lr schedule the checkpoint recorded; the other options are this run's choice.
    """
    dist = dist or Distributed(device=resolve_device(device))
    model, meta = tinygpt_file.load(path)
    state = meta["state"]
    run_options = RunOptions.given(meta.get("training"), **(options or {}))
    if preset is not None and meta.get("preset") not in (None, preset):
        raise ConfigError(f"--preset {preset} but the checkpoint is a {meta['preset']!r} model")
    train_cfg = _resumed_train_config(meta, overrides)
    data_state = meta.get("dataState")
    if not (isinstance(data_state, dict) and isinstance(data_state.get("batchesDrawn"), int)
            and data_state["batchesDrawn"] >= 0 and data_state.get("seed") == train_cfg.seed):
        raise ConfigError(f"checkpoint's dataState {data_state!r} is missing or does not match its "
                          f"training seed {train_cfg.seed}: it cannot be resumed exactly")
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
    train, val = corpus.split(train_cfg.valFraction, model.config.ctx)
    model = _placed(model, dist, run_options)
    optimizer = make_optimizer(model, train_cfg)
    (restore_sharded_optimizer if is_sharded(model) else tinygpt_file.restore_optimizer)(model, optimizer, state)
    batches = BatchStream(train, model.config.ctx, train_cfg.batch, train_cfg.seed, data_state["batchesDrawn"])
    run = TrainingRun(meta.get("preset"), train_cfg, corpus, model, optimizer, batches, val, state.step,
                      _history(meta, "lossHistory"), _history(meta, "valHistory"),
                      dist=dist, options=run_options, corpora=corpora_of(meta, state.step), corpus_from=state.step)
    run.scaler = run_options.loss_scaler(dist.device, meta.get("training"))
    return run


def corpora_of(meta: dict, step: int) -> list[dict]:
    """Every corpus a checkpoint trained on: its header's `corpora` (docs/format.md), or for a file written before
    that key its `corpus`, from step 0 to `step` (none when it records no corpus or took no step)."""
    recorded = meta.get("corpora")
    if isinstance(recorded, list):
        return [dict(c) for c in recorded]
    corpus = meta.get("corpus")
    if not isinstance(corpus, dict) or "sha256" not in corpus or step <= 0:
        return []
    return [{"name": corpus.get("name"), "bytes": corpus.get("bytes"), "sha256": corpus["sha256"],
             "fromStep": 0, "toStep": step}]


def extend_corpora(corpora: list[dict], identity: dict, start: int, end: int) -> list[dict]:
    """The list after training on `identity` from step `start` to `end`: the last entry grows when it is the same
    corpus ending at `start`, else a new entry is added; no step adds nothing (the page's model_record.js alike)."""
    out = [dict(c) for c in corpora]
    if end <= start:
        return out
    last = out[-1] if out else None
    if last is not None and last.get("sha256") == identity["sha256"] and last.get("toStep") == start:
        last["toStep"] = end
    else:
        out.append({**identity, "fromStep": start, "toStep": end})
    return out


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

