"""The `tinygpt` command: train, finetune (LoRA), sample, eval and export here; bench (bench/cli.py) and the
playground's serve and build (server/cli.py) join it through the COMMANDS_GROUP entry points.

Bad input (a config, corpus or checkpoint that cannot work) prints one line to stderr and exits 2.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from importlib.metadata import entry_points

import torch

from . import tinygpt_file
from .config import DEFAULT_CORPUS, ConfigError, sampling_defaults
from .data import Corpus, CorpusError
from .flops import flops_per_token, peak_flops
from .evaluate import bits_per_byte, evaluate_file, evaluate_val, split_settings
from .sample import Utf8Writer, generate
from .tinygpt_file import TinyGPTFileError
from .distributed import DEFAULT_TIMEOUT_S, DistributedError, init_from_env, launch_local, under_torchrun
from .safe_files import OutputError, check_output, remove_stale_partials, same_file
from .train import LR_SCHEDULES, PRECISIONS, TrainingError, check_out_path, new_run, resolve_device, resume_run
from .finetune import new_finetune, parse_targets, resume_finetune, save_merged
from .lora import TARGETS, attach_adapter, load_adapter, lora_defaults, read_adapter

# Commands that live outside the reference (`serve` and `build` in server/, `bench` in bench/) add
# themselves through this entry-point group (pyproject.toml), so python_ref imports neither: each is a
# function that takes the subparsers and adds its command. `make setup` installs the checkout
# editable, which registers them for `python -m python_ref.cli` too.
COMMANDS_GROUP = "tinygpt.commands"
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def check_train_args(args) -> None:
    """Every refusal that needs no work, before any output, launch or step (issue 59): the numbers' ranges,
    --bf16 against the device, and --out (writable, not the corpus, not another run's checkpoint)."""
    if args.nproc is not None and args.nproc < 1:
        raise ConfigError(f"--nproc must be a positive integer, got {args.nproc}")
    if args.save_every < 0:
        raise ConfigError(f"--save-every must be >= 0 (0: save only at the end), got {args.save_every}")
    if not (args.dist_timeout > 0 and math.isfinite(args.dist_timeout)):
        raise ConfigError(f"--dist-timeout must be a positive number of seconds, got {args.dist_timeout}")
    if args.save_every and args.out is None:
        raise ConfigError("--save-every needs --out, the file to save to")
    if args.bf16:  # the older spelling of --precision bf16
        if args.precision not in (None, "bf16"):
            raise ConfigError(f"--bf16 and --precision {args.precision} disagree; give one")
        args.precision = "bf16"
    if args.precision not in (None, "fp32") and args.nproc is None and not under_torchrun() \
            and resolve_device(args.device).type not in ("cuda", "cpu"):
        raise ConfigError(f"--precision {args.precision} is autocast on CUDA or the CPU; this run is on "
                          f"{resolve_device(args.device).type}")
    if args.out is not None:
        check_output("--out", args.out, {"--corpus": args.corpus}, force=args.force,
                      replaces=None if args.resume and same_file(args.out, args.resume) else other_checkpoint)
        remove_stale_partials(args.out)


def other_checkpoint(path) -> str | None:
    """Why a new run must not silently replace the file at `path` (None: nothing would be lost)."""
    try:
        head = open(path, "rb").read(4)
    except OSError:
        return None
    if head != tinygpt_file.MAGIC:
        return "is not a .tinygpt checkpoint"
    return "holds a checkpoint that this run would replace (continue it with --resume)"


def cmd_train(args) -> int:
    check_train_args(args)
    if args.nproc is not None:
        if under_torchrun():
            raise ConfigError("--nproc launches torchrun; a process already under torchrun must not pass it")
        return launch_local(args.nproc, _without_nproc(args.argv[1:]))
    dist = init_from_env(resolve_device(args.device), args.dist_timeout)
    try:
        return _train(args, dist)
    finally:
        dist.close()


def _train(args, dist) -> int:
    overrides = dict(lr=args.lr, batch=args.batch, steps=args.steps, seed=args.seed, evalEvery=args.eval_every)
    options = dict(gradAccum=args.grad_accum, lrSchedule=args.lr_schedule, warmupSteps=args.warmup_steps,
                   precision=args.precision, compile=args.compile or None,
                   fsdp=args.fsdp or None)
    corpus = Corpus.from_file(args.corpus)
    if args.resume:
        run = resume_run(args.resume, corpus, args.device, args.preset, dist, options, **overrides)
        if args.steps is not None and args.steps <= run.step:
            # --steps is the total to reach: silently training nothing and saving a copy helps nobody
            raise ConfigError(f"--steps {args.steps} is not past the checkpoint's step {run.step}: --steps is the "
                              f"total step to reach (e.g. --steps {run.step + 100} for 100 more)")
    else:
        run = new_run(args.preset, corpus, args.device, dist, options, **overrides)
    say = print if dist.is_main else _silent  # one voice for the whole run: rank 0's
    auto = " (auto: cuda, then mps, else cpu)" if args.device == "auto" else ""
    ranks = f", {dist.world_size} ranks x {run.train_cfg.batch // dist.world_size} rows" if dist.world_size > 1 else ""
    say(f"preset {run.preset}, {run.model.num_params():,} parameters, device {dist.device}{auto}{ranks}, "
        f"corpus {corpus.name} ({corpus.data.size:,} bytes), step {run.step} -> {run.train_cfg.steps}", file=sys.stderr)
    if args.out is None:
        say("no --out given: the trained model will not be saved", file=sys.stderr)
    try:
        run.run(run.train_cfg.steps, args.out, args.save_every, progress=not args.quiet)
    except RuntimeError as e:
        if not dist.active or isinstance(e, (TrainingError, DistributedError)):
            raise
        raise _lost_peers(e, dist, run.step, run.saved_step, args.out) from None
    best = run.best_val()
    summary = f"step {run.step}: final loss {_num(run.final_loss())}, best val loss {_num(best)}"
    if best is not None:
        summary += f" ({bits_per_byte(best):.4f} bits/byte)"
    if run.tokens_per_s is not None:
        achieved = run.tokens_per_s * flops_per_token(run.model.config)
        summary += f", {run.tokens_per_s:,.0f} tokens/s, {achieved / 1e12:.2f} TFLOP/s"
        half = run.options.precision != "fp32"
        peak = peak_flops(dist.device, half)
        if peak:  # tokens/s counts every rank: the peak is every GPU's
            gpus = f"{dist.world_size} x " if dist.world_size > 1 else ""
            summary += f" (MFU {achieved / (peak * dist.world_size):.1%} of " \
                       f"{gpus}{torch.cuda.get_device_name(dist.device)}'s " \
                       f"{peak / 1e12:.0f} TFLOP/s {run.options.precision if half else 'fp32'})"
    say(summary + (f"; saved {args.out}" if args.out else ""))
    return 0


def _lost_peers(e: RuntimeError, dist, step: int, saved: int | None, out: str | None) -> DistributedError:
    """A collective failed mid-run: a rank died (torchrun then stops the others) or the network failed."""
    kept = f"the last checkpoint, {out} (step {saved}), is intact: continue it with --resume {out}" \
        if saved is not None else "this run saved no checkpoint yet (--save-every N keeps one)"
    first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    return DistributedError(f"rank {dist.rank} of {dist.world_size} lost the other ranks during step {step + 1} "
                            f"({first}); a rank died or the network failed, so the run stops; {kept}")


def _silent(*args, **kwargs) -> None:
    pass


def _without_nproc(train_argv: list[str]) -> list[str]:
    """The train arguments minus --nproc N / --nproc=N: what each torchrun worker gets."""
    out, skip = [], False
    for a in train_argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def cmd_finetune(args) -> int:
    check_out_path(args.out)
    check_out_path(args.merged_out, "--merged-out")
    corpus = Corpus.from_file(args.corpus)
    lora = dict(rank=args.rank, alpha=args.alpha, targets=parse_targets(args.targets))
    overrides = dict(lr=args.lr, batch=args.batch, steps=args.steps, seed=args.seed, evalEvery=args.eval_every,
                     weightDecay=args.weight_decay)
    if args.resume:
        run = resume_finetune(args.resume, args.base, corpus, args.device, **lora, **overrides)
        if args.steps is not None and args.steps <= run.step:
            raise ConfigError(f"--steps {args.steps} is not past the adapter file's step {run.step}: --steps is the "
                              f"total step to reach (e.g. --steps {run.step + 100} for 100 more)")
    else:
        run = new_finetune(args.base, corpus, args.device, **lora, **overrides)
    c, t = run.lora.config, run.train_cfg
    print(f"LoRA rank {c.rank}, alpha {c.alpha:g}, targets {','.join(c.targets)}: "
          f"{sum(p.numel() for p in run.lora.parameters()):,} adapter parameters on a frozen base of "
          f"{run.model.num_params():,}; lr {t.lr:g}, weight decay {t.weightDecay:g}, batch {t.batch}; "
          f"corpus {corpus.name} ({corpus.data.size:,} bytes), step {run.step} -> {t.steps}", file=sys.stderr)
    if args.out is None:
        print("no --out given: the adapters will not be saved", file=sys.stderr)
    run.run(t.steps, args.out, args.save_every, args.merged_out, progress=not args.quiet)
    best = run.best_val()
    summary = f"step {run.step}: final loss {_num(run.final_loss())}, best val loss {_num(best)}"
    if best is not None:
        summary += f" ({bits_per_byte(best):.4f} bits/byte)"
    saved = [p for p in (args.out, args.merged_out) if p]
    print(summary + (f"; saved {' and '.join(saved)}" if saved else ""))
    return 0


def _load_model(checkpoint, device, adapter=None):
    """A checkpoint, with an adapter file's LoRA attached (refused if it was made on other weights)."""
    model, meta = tinygpt_file.load(checkpoint, resolve_device(device))
    if adapter is not None:
        load_adapter(adapter, model)
    return model, meta


def cmd_sample(args) -> int:
    model, _ = _load_model(args.checkpoint, args.device, args.adapter)
    # surrogateescape gives back the raw bytes of a prompt that is not valid UTF-8.
    prompt = args.prompt.encode("utf-8", errors="surrogateescape")
    out = sys.stdout
    out.write(prompt.decode("utf-8", errors="replace"))
    writer = Utf8Writer(lambda text: (out.write(text), out.flush()))
    generate(model, prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed,
             use_cache=not args.no_cache, on_token=writer)
    writer.finish()
    out.write("\n")
    return 0


def cmd_eval(args) -> int:
    model, meta = _load_model(args.checkpoint, args.device, args.adapter)
    if args.file is not None:
        results = [evaluate_file(model, args.file)]
    else:
        corpus = Corpus.from_file(args.corpus)
        recorded = meta.get("corpus")
        if isinstance(recorded, dict) and recorded.get("sha256") not in (None, corpus.sha256):
            print(f"note: {corpus.name} is not the corpus this checkpoint was trained on "
                  f"({recorded.get('name')}); its val split is evaluated anyway", file=sys.stderr)
        results = evaluate_val(model, corpus, *split_settings(meta))
    for r in results:
        print(json.dumps(dict(checkpoint=str(args.checkpoint), **r.to_json())))
    return 0


def export_replaces(path) -> str | None:
    """An export writes weights alone: it must not silently replace a file that could be resumed."""
    if (reason := other_checkpoint(path)) and "not a .tinygpt" in reason:
        return reason
    try:
        resumable = tinygpt_file.read_state(path).m is not None
    except TinyGPTFileError:
        return None  # an unreadable checkpoint holds nothing to keep
    return "holds a resumable checkpoint (with AdamW moments) that this weights-only export would replace" \
        if resumable else None


def cmd_export(args) -> int:
    check_output("out", args.out, {"the checkpoint": args.checkpoint}, replaces=export_replaces, force=args.force)
    state = tinygpt_file.read_state(args.checkpoint)
    dtype = "float16" if args.fp16 else "float32"
    if args.adapter is not None:
        adapter = read_adapter(args.adapter)
        lora = attach_adapter(adapter, tinygpt_file.model_from_state(state))  # refused on another base
        save_merged(args.out, lora, adapter.header, adapter.step, dtype)
        print(f"saved {args.out}: {dtype} weights of {state.config.param_count():,} parameters with "
              f"{args.adapter} merged in, no AdamW moments")
        return 0
    # The new file gets its own savedAt (and CRCs); every other key (training, corpus, ...) is kept.
    meta = {k: v for k, v in state.header.items() if k != "savedAt"}
    tinygpt_file.write_state(args.out, tinygpt_file.CheckpointState(state.config, state.step, state.weights,
                                                                    header=meta), dtype)
    print(f"saved {args.out}: {dtype} weights of {state.config.param_count():,} parameters, no AdamW moments")
    return 0


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def build_parser() -> argparse.ArgumentParser:
    s = sampling_defaults()
    p = argparse.ArgumentParser(prog="tinygpt", description="TinyGPT PyTorch reference: a byte-level GPT.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train (or resume) on a text file and save a .tinygpt checkpoint")
    t.add_argument("--preset", help="model preset from presets.json (default: its defaultPreset)")
    t.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="training text (default: TinyShakespeare)")
    t.add_argument("--steps", type=int, help="total steps to reach (a resumed run continues to this step)")
    t.add_argument("--lr", type=float, help="AdamW learning rate (constant)")
    t.add_argument("--batch", type=int, help="sequences per step")
    t.add_argument("--seed", type=int, help="seed of the init and data streams")
    t.add_argument("--eval-every", type=int, help="steps between val-loss evaluations (0: only at the end)")
    t.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (cuda, then mps, else cpu)")
    t.add_argument("--out", help="checkpoint path (.tinygpt), written at the end")
    t.add_argument("--save-every", type=int, default=0, help="also save to --out every N steps")
    t.add_argument("--force", action="store_true", help="let --out replace a file a new run would otherwise keep "
                   "(another checkpoint, a file that is no checkpoint, an input)")
    t.add_argument("--resume", help="continue exactly from this checkpoint (same corpus required)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--nproc", type=int, help="launch torchrun with N processes on this machine (one per GPU)")
    t.add_argument("--dist-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds a rank waits for the others, joining and at each step (default {DEFAULT_TIMEOUT_S})")
    t.add_argument("--grad-accum", type=int, help="micro-batches per step (the batch stays --batch; default 1)")
    t.add_argument("--lr-schedule", choices=LR_SCHEDULES, help="lr multiplier per step (default none: constant)")
    t.add_argument("--warmup-steps", type=int, help="linear lr warmup over the first W steps (default 0)")
    t.add_argument("--precision", choices=PRECISIONS, help="fp32 (the default, what the browser engines match), or "
                   "autocast of the forward pass in bf16 or fp16 (fp16 with a dynamic loss scale); CUDA or CPU")
    t.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # the older spelling of --precision bf16
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.add_argument("--fsdp", action="store_true",
                   help="shard weights and AdamW moments over the ranks (FSDP2), for models one device cannot hold")
    t.set_defaults(func=cmd_train)

    d = lora_defaults()
    f = sub.add_parser("finetune", help="fine-tune a saved model with LoRA: the base stays frozen, only "
                                        "low-rank adapters train; saves a resumable adapter file (.tgla)")
    f.add_argument("base", help="the base model (.tinygpt), frozen")
    f.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="text to fine-tune on (default: TinyShakespeare)")
    f.add_argument("--rank", "--lora-rank", type=int, help=f"adapter rank r (default {d['rank']})")
    f.add_argument("--alpha", "--lora-alpha", type=float,
                   help=f"adapter scale alpha; the update is (alpha / r) B A (default {d['alpha']})")
    f.add_argument("--targets", "--lora-targets",
                   help=f"adapted projections, comma-separated among {','.join(TARGETS)}, or 'all' "
                        f"(default {','.join(d['targets'])})")
    f.add_argument("--steps", type=int, help=f"total steps to reach (default {d['steps']})")
    f.add_argument("--lr", type=float, help=f"AdamW learning rate (default {d['lr']:g})")
    f.add_argument("--weight-decay", type=float,
                   help=f"AdamW weight decay of the adapters (default {d['weightDecay']:g})")
    f.add_argument("--batch", type=int, help="sequences per step (default: the base's preset's)")
    f.add_argument("--seed", type=int, help="seed of the adapters' init and of the data stream")
    f.add_argument("--eval-every", type=int, help="steps between val-loss evaluations (0: only at the end)")
    f.add_argument("--device", default="auto", help="cpu, cuda, mps or auto")
    f.add_argument("--out", help="the adapter file (.tgla), with AdamW moments: --resume continues it exactly")
    f.add_argument("--merged-out", help="also write the merged model (a plain .tinygpt) at the end")
    f.add_argument("--save-every", type=int, default=0, help="also save --out every N steps")
    f.add_argument("--resume", help="continue exactly from this adapter file (same base and corpus required)")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_finetune)

    g = sub.add_parser("sample", help="generate text from a checkpoint")
    g.add_argument("checkpoint")
    g.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    g.add_argument("--max-new-tokens", type=int, default=s["maxNewTokens"])
    g.add_argument("--temperature", type=float, default=s["temperature"], help="0 = greedy")
    g.add_argument("--top-k", type=int, default=s["topK"], help="0 = all 256 bytes")
    g.add_argument("--seed", type=int, default=s["seed"], help="seed of the sample stream")
    g.add_argument("--device", default="auto")
    g.add_argument("--no-cache", action="store_true", help="recompute the whole window per token (no KV cache)")
    g.add_argument("--adapter", help="a LoRA adapter file (.tgla) of this checkpoint, applied while sampling")
    g.set_defaults(func=cmd_sample)

    e = sub.add_parser("eval", help="loss and bits per byte of a checkpoint")
    e.add_argument("checkpoint")
    e.add_argument("--file", help="evaluate this whole file (default: the corpus's val split)")
    e.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="corpus whose val split is evaluated")
    e.add_argument("--adapter", help="a LoRA adapter file (.tgla) of this checkpoint, applied")
    e.add_argument("--device", default="auto")
    e.set_defaults(func=cmd_eval)

    x = sub.add_parser("export", help="write a checkpoint's weights alone (no AdamW moments), optionally as float16")
    x.add_argument("checkpoint")
    x.add_argument("out", help="the new .tinygpt file")
    x.add_argument("--fp16", action="store_true", help="the compact float16 file: half the size, weights rounded")
    x.add_argument("--force", action="store_true", help="replace OUT even where it is the input or a resumable "
                   "checkpoint")
    x.add_argument("--adapter", help="merge this LoRA adapter file (.tgla) into the weights: a plain fine-tuned model")
    x.set_defaults(func=cmd_export)

    for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda c: c.name):
        command.load()(sub)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # train --nproc passes the same arguments on to each torchrun worker
    try:
        return args.func(args)
    except (ConfigError, CorpusError, TinyGPTFileError, TrainingError, DistributedError, OutputError) as e:
        print(f"tinygpt {args.command}: error: {e}", file=sys.stderr)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"tinygpt {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
    except KeyboardInterrupt as e:
        print(f"tinygpt {args.command}: interrupted{': ' + str(e) if str(e) else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    code = main()
    if under_torchrun():
        # A torchrun rank skips the interpreter's teardown. After destroy_process_group and a written
        # checkpoint, a rank of a gloo run still aborted there 4 times in 90 (C++ "terminate called
        # without an active exception", SIGABRT), and torchrun then failed the whole run
        # (docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §29).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
