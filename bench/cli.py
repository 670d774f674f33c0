"""`tinygpt bench`: PyTorch's training step per preset as JSON lines, or with --all every backend of
this machine (bench/all.py) as bench.json and PNG plots. It joins the `tinygpt` command through the
`tinygpt.commands` entry point (pyproject.toml); the reference itself imports nothing from bench/.
"""
from __future__ import annotations

import json

import torch

from python_ref.config import ConfigError, preset_names

from .torch_step import bench_preset


def cmd_bench(args) -> int:
    if args.all or args.plot:
        return _bench_all(args)
    given = [dest for dest in BENCH_ALL_OPTIONS if getattr(args, dest) not in (None, False)]
    if given:
        raise ConfigError(f"{', '.join('--' + d.replace('_', '-') for d in given)}: options of `tinygpt bench --all` "
                          "(or --plot)")
    if args.threads is not None:
        if args.threads <= 0:
            raise ConfigError(f"--threads must be positive, got {args.threads}")
        torch.set_num_threads(args.threads)
    presets = args.preset or ["small"]
    if "all" in presets:
        presets = preset_names()
    steps = 10 if args.steps is None else args.steps
    for device in args.device or ["cpu"]:
        for preset in presets:
            print(json.dumps(bench_preset(preset, device, steps, args.warmup)), flush=True)
    return 0


# The options of `bench --all` and their defaults: None in the parser, so that giving one without
# --all is an error rather than silently ignored.
BENCH_ALL_OPTIONS = {"presets": None, "backends": None, "rounds": 2, "seconds": 2.0, "max_cell_seconds": 60.0,
                     "no_decode": False, "decode_tokens": 512, "out": None, "name": "bench"}


def _bench_all(args) -> int:
    from .all import bench_all, redraw  # matplotlib, tqdm, the backends: only when asked for

    if args.preset or args.device:
        raise ConfigError("--all measures every backend over --presets (comma-separated); --preset and "
                          "--device are for the one-backend bench")
    for dest, default in BENCH_ALL_OPTIONS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    return redraw(args) if args.plot else bench_all(args)



def register(sub) -> None:
    """Adds `bench` to the subparsers of `tinygpt`."""
    b = sub.add_parser("bench", help="ms/step, tokens/s and GFLOP/s of full training steps; one JSON line each "
                       "(--all: every backend of this machine, as bench.json and PNG plots)")
    b.add_argument("--preset", action="append", help="preset name, repeatable, or 'all' (default: small)")
    b.add_argument("--device", action="append", help="cpu, cuda, mps or auto; repeatable (default: cpu)")
    b.add_argument("--steps", type=int, help="timed steps (default 10; with --all: at least this many per cell, "
                   "default 3)")
    b.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    b.add_argument("--threads", type=int, help="torch.set_num_threads for CPU runs (with --all: the 'all cores' "
                   "count, default every core this process may use)")
    a = b.add_argument_group("every backend (tinygpt bench --all)")
    a.add_argument("--all", action="store_true", help="measure every training backend available here over the "
                   "presets, round-robin; write DIR/NAME.json and PNG plots")
    a.add_argument("--presets", help="comma-separated (default: tiny,small,medium,large; with CUDA up to massive)")
    a.add_argument("--backends", help="comma-separated shell patterns of backend names, e.g. 'pytorch-*,native-*' "
                   "(default: all; an unknown one lists them)")
    a.add_argument("--rounds", type=int, help="every cell once per round; a figure is the median (default 2)")
    a.add_argument("--seconds", type=float, help="about this many seconds of timed steps per cell (default 2)")
    a.add_argument("--max-cell-seconds", type=float, help="skip a cell expected to take longer, saying so "
                   "(default 60)")
    a.add_argument("--no-decode", action="store_true", help="leave out decode speed (KV cache vs recompute)")
    a.add_argument("--decode-tokens", type=int, help="new tokens per decode figure (default 512)")
    a.add_argument("--out", help="folder for NAME.json and NAME-*.png (default: the current one; with --plot: "
                   "the JSON's)")
    a.add_argument("--name", help="file name stem (default: bench)")
    a.add_argument("--plot", metavar="FILE.json", help="only draw the plots of a file written earlier")
    b.set_defaults(func=cmd_bench)


def main(argv=None) -> int:
    """`python -m bench.cli ARGS` is `tinygpt bench ARGS` where the package is not installed (the GPU machine)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="tinygpt")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"tinygpt bench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
