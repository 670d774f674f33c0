"""Data-parallel training under torchrun (CPU, gloo): N ranks follow the one-process trajectory.

Each torchrun launch costs a few seconds of start-up, so the module keeps to a handful of them;
the one-process references run in this process.
"""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from python_ref import tinygpt_file
from python_ref.cli import main
from python_ref.config import ConfigError, DEFAULT_CORPUS
from python_ref.data import Corpus
from python_ref.distributed import Distributed
from python_ref.train import RunOptions, new_run
from support.tinygpt_native import NativeModel, state_bytes_of_file

from conftest import ROOT

# Run by `make test` after the other tests, in one process: beside a second test process, a gloo rank
# sometimes aborted inside torch ("terminate called without an active exception";
# docs/lab/2026-11-26-wgsl-step-subgroups.md §22).
# §29 placed that abort in a rank's interpreter teardown, which python_ref/cli.py now skips.
pytestmark = pytest.mark.alone

LOSS_RTOL = 1e-5     # the bound on losses, N ranks vs one process
WEIGHT_ATOL = 1e-5   # final weights and AdamW moments (measured max differences are printed)
LAUNCH_TIMEOUT_S = 300  # a hung launch only: slow days on CI's 2-core box, shared with a second test process
RUN_ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-40k.txt"
    path.write_bytes(DEFAULT_CORPUS.read_bytes()[:40_000])
    return path


def train_args(corpus_path, steps, out, *more):
    return ["--preset", "tiny", "--device", "cpu", "--quiet", "--eval-every", "10", "--corpus", str(corpus_path),
            "--steps", str(steps), "--out", str(out), *map(str, more)]


def train_here(corpus_path, steps, out, *more):
    """One process, in this process: the reference trajectory."""
    assert main(["train", *train_args(corpus_path, steps, out, *more)]) == 0
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*launcher_args) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *map(str, launcher_args), "-m", "python_ref.cli", "train"]


def run_all(*commands, timeout=LAUNCH_TIMEOUT_S) -> list[subprocess.CompletedProcess]:
    """Run the commands side by side, each in its own session; whatever still runs at the end is stopped."""
    procs = [subprocess.Popen(c, cwd=ROOT, env=RUN_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for c in commands]
    deadline = time.monotonic() + timeout
    try:
        results = []
        for c, p in zip(commands, procs):
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append(subprocess.CompletedProcess(c, p.returncode, out, err))
        return results
    finally:
        for p in procs:
            _stop_session(p)


def _stop_session(p: subprocess.Popen) -> None:
    """SIGTERM first (torchrun then stops its workers, which run in sessions of their own), SIGKILL if it stays."""
    if p.poll() is not None:
        return
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@contextlib.contextmanager
def long_run_saved_once(corpus_path, out):
    """2 ranks training 'forever' with a save every 5 steps, handed over once the first checkpoint exists;
    whatever still runs afterwards is stopped."""
    cmd = torchrun("--standalone", "--nproc_per_node", 2) + train_args(corpus_path, 100_000, out, "--save-every", 5)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=RUN_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert out.exists(), proc.communicate(timeout=5)[1][-3000:] if proc.poll() is not None else "no checkpoint"
        yield proc
    finally:
        _stop_session(proc)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"{' '.join(result.args)}\nexit {result.returncode}\n{result.stderr[-3000:]}"
    return result


def compare(path, reference, label):
    """Max relative loss difference and max weight/moment difference against the reference; both asserted."""
    a, b = tinygpt_file.read_state(path), tinygpt_file.read_state(reference)
    assert a.step == b.step and a.header["dataState"] == b.header["dataState"]
    la, lb = np.array(a.header["lossHistory"]), np.array(b.header["lossHistory"])
    assert np.array_equal(la[:, 0], lb[:, 0])
    loss_rel = float(np.max(np.abs(la[:, 1] - lb[:, 1]) / np.abs(lb[:, 1])))
    val = dict(map(tuple, a.header["valHistory"]))  # a run that stopped half-way also evaluated there
    val_rel = max(abs(val[step] - y) / abs(y) for step, y in b.header["valHistory"])
    weights = max(float(np.max(np.abs(a.weights[n] - b.weights[n]))) for n in b.weights)
    moments = max(float(np.max(np.abs(x[n] - y[n]))) for x, y in ((a.m, b.m), (a.v, b.v)) for n in b.m)
    print(f"\n{label}: {len(la)} losses, max rel diff {loss_rel:.2e}; val max rel diff {val_rel:.2e}; "
          f"weights max abs diff {weights:.2e}; AdamW moments max abs diff {moments:.2e}")
    assert loss_rel < LOSS_RTOL and val_rel < LOSS_RTOL
    assert weights < WEIGHT_ATOL and moments < WEIGHT_ATOL
    return a


@pytest.fixture(scope="module")
def reference(corpus_path, tmp_path_factory):
    """One process: steps 1..20 (and 1..5 for the two-node run)."""
    d = tmp_path_factory.mktemp("reference")
    return {steps: train_here(corpus_path, steps, d / f"ref{steps}.tinygpt") for steps in (5, 20)}


def same_file_but_run_metadata(path, reference) -> None:
    """Same header keys and values apart from `training`'s run metadata, same state layout and length."""
    a, b = tinygpt_file.read_state(path), tinygpt_file.read_state(reference)
    run_keys = ("worldSize", "rankBatch", "gradAccum", "fsdp")
    def strip(h):
        return {**h, "training": {k: v for k, v in h["training"].items() if k not in run_keys},
                "finalLoss": None, "bestVal": None, "lossHistory": None, "valHistory": None,
                "sample": None, "stateCrc32": None, "savedAt": None, "headerCrc32": None}
    assert strip(a.header) == strip(b.header)
    # the state's length: the file less its prefix and the header as written (a header read back and encoded
    # again can be shorter: 1.0 is read as JSON.parse reads it, 1)
    def state_bytes(p):
        with open(p, "rb") as f:
            header_len = tinygpt_file.PREFIX.unpack(f.read(tinygpt_file.PREFIX.size))[2]
        return os.path.getsize(p) - tinygpt_file.PREFIX.size - header_len
    assert state_bytes(path) == state_bytes(reference)


def test_two_ranks_follow_one_process_and_only_rank0_writes(corpus_path, reference, tmp_path):
    out = tmp_path / "two.tinygpt"
    result = ok(run_all(torchrun("--standalone", "--nproc_per_node", 2)
                        + train_args(corpus_path, 20, out, "--save-every", 5))[0])
    state = compare(out, reference[20], "2 ranks vs 1 process, 20 steps")
    assert state.header["training"]["worldSize"] == 2 and state.header["training"]["rankBatch"] == 8
    same_file_but_run_metadata(out, reference[20])
    assert sorted(os.listdir(tmp_path)) == ["two.tinygpt"]  # no second writer, no temp file left
    assert result.stdout.count("step 20: final loss") == 1  # rank 0 alone reports
    assert "tokens/s" in result.stdout


def test_one_rank_under_torchrun_writes_the_same_bytes(corpus_path, reference, tmp_path):
    """Bit-equal files need the same sums in the same order: one rank. With N ranks the gradient is
    averaged over shards (another rounding), so the weights agree to ~1e-7, not bit for bit."""
    out = tmp_path / "one.tinygpt"
    ok(run_all(torchrun("--standalone", "--nproc_per_node", 1) + train_args(corpus_path, 5, out))[0])
    (header, state), (ref_header, ref_state) = split_file(out), split_file(reference[5])
    def when(h):
        return {k: v for k, v in h.items() if k not in ("savedAt", "headerCrc32")}
    print(f"\ntorchrun, 1 rank vs 1 process, 5 steps: {len(state):,} state bytes identical: {state == ref_state}; "
          f"headers identical apart from savedAt: {when(header) == when(ref_header)}")
    assert state == ref_state and when(header) == when(ref_header)


def split_file(path) -> tuple[dict, bytes]:
    """(header, the raw state bytes after it)."""
    raw = path.read_bytes()
    _, _, n = tinygpt_file.PREFIX.unpack_from(raw)
    return tinygpt_file.decode_header(raw[tinygpt_file.PREFIX.size:tinygpt_file.PREFIX.size + n]), \
        raw[tinygpt_file.PREFIX.size + n:]


def test_fsdp_shards_follow_one_process_and_save_the_full_file(corpus_path, reference, tmp_path):
    out = tmp_path / "fsdp.tinygpt"
    ok(run_all(torchrun("--standalone", "--nproc_per_node", 2)
               + train_args(corpus_path, 20, out, "--fsdp", "--grad-accum", 2, "--save-every", 10))[0])
    state = compare(out, reference[20], "FSDP2, 2 ranks x 2 micro-batches vs 1 process, 20 steps")
    assert state.header["training"]["fsdp"] is True and state.header["training"]["gradAccum"] == 2
    same_file_but_run_metadata(out, reference[20])
    assert os.listdir(tmp_path) == ["fsdp.tinygpt"]
    # the C++ core takes the file's state as it is and measures the validation loss the run recorded
    training = state.header["training"]
    with NativeModel(state.config, batch=training["batch"]) as native:
        native.import_state(state_bytes_of_file(out))
        native.set_corpus(corpus_path.read_bytes(), training["valFraction"])
        cpp = native.eval(training["evalWindows"])
    recorded = state.header["valHistory"][-1][1]
    print(f"C++ core on the FSDP file: validation {cpp:.6f}, the run recorded {recorded:.6f} "
          f"(rel diff {abs(cpp - recorded) / recorded:.1e})")
    assert abs(cpp - recorded) / recorded < LOSS_RTOL


def test_resume_across_world_sizes(corpus_path, reference, tmp_path):
    # 4 ranks to step 10, then 1 process to 20.
    ok(run_all(torchrun("--standalone", "--nproc_per_node", 4)
               + train_args(corpus_path, 10, tmp_path / "a10.tinygpt"))[0])
    assert tinygpt_file.read_state(tmp_path / "a10.tinygpt").header["training"]["rankBatch"] == 4
    train_here(corpus_path, 20, tmp_path / "a20.tinygpt", "--resume", tmp_path / "a10.tinygpt")
    compare(tmp_path / "a20.tinygpt", reference[20], "4 ranks to 10, 1 process to 20")
    # 1 process to step 10, 2 ranks (launched by tinygpt train --nproc) to 15, 4 FSDP ranks to 20.
    train_here(corpus_path, 10, tmp_path / "b10.tinygpt")
    def cli(n):
        return [sys.executable, "-m", "python_ref.cli", "train", "--nproc", str(n)]
    ok(run_all(cli(2) + train_args(corpus_path, 15, tmp_path / "b15.tinygpt", "--resume", tmp_path / "b10.tinygpt"))[0])
    ok(run_all(cli(4) + train_args(corpus_path, 20, tmp_path / "b20.tinygpt", "--resume", tmp_path / "b15.tinygpt",
                                   "--fsdp"))[0])
    state = compare(tmp_path / "b20.tinygpt", reference[20], "1 process to 10, 2 ranks to 15, 4 FSDP ranks to 20")
    assert state.header["training"]["worldSize"] == 4 and state.header["training"]["fsdp"] is True


def test_a_dead_rank_stops_the_run_and_keeps_the_checkpoint(corpus_path, tmp_path):
    """SIGKILL one worker mid-run: the other reports it in one line, torchrun ends, nothing hangs."""
    out = tmp_path / "dead.tinygpt"
    with long_run_saved_once(corpus_path, out) as proc:
        workers = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(workers) == 2
        os.kill(int(workers[-1]), signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - killed
    line = next(err_line for err_line in err.splitlines() if "lost the other ranks" in err_line)
    print(f"\none of 2 workers SIGKILLed: torchrun exited {proc.returncode} after {waited:.1f} s; "
          f"the survivor said:\n{line}")
    assert proc.returncode != 0 and waited < 35
    assert "is intact: continue it with --resume" in line
    assert all(not Path(f"/proc/{w}").exists() for w in workers)  # no worker left behind
    state = tinygpt_file.read_state(out)  # the last complete checkpoint, never a half-written one
    assert state.step % 5 == 0 and state.header["dataState"]["batchesDrawn"] == state.step
    assert os.listdir(tmp_path) == ["dead.tinygpt"]


def test_world_size_not_dividing_the_batch_is_refused(corpus_path, tmp_path):
    out = tmp_path / "never.tinygpt"
    cli = [sys.executable, "-m", "python_ref.cli", "train", "--nproc", "2"]
    result = run_all(cli + train_args(corpus_path, 3, out, "--batch", 15))[0]
    print(next(line for line in result.stderr.splitlines() if "not divisible" in line))
    assert result.returncode != 0
    assert "--batch 15 is not divisible by world size 2" in result.stderr
    assert not out.exists() and os.listdir(tmp_path) == []


def test_a_corrupt_resume_file_is_refused_by_every_rank(corpus_path, reference, tmp_path):
    bad = tmp_path / "bad.tinygpt"
    bad.write_bytes(reference[5].read_bytes()[:-100])
    out = tmp_path / "never.tinygpt"
    cli = [sys.executable, "-m", "python_ref.cli", "train", "--nproc", "2"]
    result = run_all(cli + train_args(corpus_path, 10, out, "--resume", bad))[0]
    refusals = [line for line in result.stderr.splitlines()
                if line.startswith("tinygpt train: error: state length mismatch") and "the file is truncated" in line]
    print("\n" + "\n".join(refusals))
    # every rank that got as far as reading the file says why (torchrun may stop a slower one first)
    assert result.returncode != 0 and refusals
    assert sorted(os.listdir(tmp_path)) == ["bad.tinygpt"]


def test_two_nodes_on_loopback_follow_one_process(corpus_path, reference, tmp_path):
    out = tmp_path / "nodes.tinygpt"
    port = free_port()
    def node(rank):
        return (torchrun("--nnodes", 2, "--node_rank", rank, "--nproc_per_node", 1, "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"tinygpt-{port}")
                + train_args(corpus_path, 5, out))
    for result in run_all(node(0), node(1)):
        ok(result)
    state = compare(out, reference[5], "2 nodes x 1 rank (c10d on 127.0.0.1) vs 1 process, 5 steps")
    assert state.header["training"]["worldSize"] == 2
    assert os.listdir(tmp_path) == ["nodes.tinygpt"]


def test_sigterm_stops_every_rank_at_a_step_boundary_and_saves(corpus_path, tmp_path):
    out = tmp_path / "stopped.tinygpt"
    with long_run_saved_once(corpus_path, out) as proc:
        proc.send_signal(signal.SIGTERM)  # torchrun passes it to both workers
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    state = tinygpt_file.read_state(out)
    print(f"\nSIGTERM: all ranks gone {waited:.1f} s later; saved at step {state.step}")
    assert "interrupted: stopped at step" in err and waited < 25  # torchrun would SIGKILL laggards at 30 s
    assert state.header["lossHistory"][-1][0] == state.step and state.header["dataState"]["batchesDrawn"] == state.step
    assert os.listdir(tmp_path) == ["stopped.tinygpt"]


def test_init_timeout_is_one_clear_line(corpus_path, tmp_path):
    """A rank whose peer never comes: exit 2 after --dist-timeout, naming the address, no checkpoint."""
    env = dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    cmd = ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "python_ref.cli", "train",
           *train_args(corpus_path, 2, tmp_path / "never.tinygpt", "--dist-timeout", 2)]
    result = run_all(cmd, timeout=60)[0]
    print(result.stderr.strip())
    assert result.returncode == 2 and "could not join the gloo process group at 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr and os.listdir(tmp_path) == []


def test_shards_are_contiguous_rows():
    assert [Distributed(rank=r, world_size=4).rank_rows(16) for r in range(4)] == \
           [slice(0, 4), slice(4, 8), slice(8, 12), slice(12, 16)]
    with pytest.raises(ConfigError, match="--batch 16 is not divisible by world size 2 x grad-accum 3"):
        Distributed(rank=0, world_size=2).rank_rows(16, grad_accum=3)


def test_grad_accum_keeps_the_trajectory_and_is_recorded(tmp_path):
    corpus = Corpus.from_bytes(DEFAULT_CORPUS.read_bytes()[:40_000], "shakespeare-40k.txt")
    plain = new_run("tiny", corpus, "cpu", steps=5)
    plain.run(5, progress=False)
    accum = new_run("tiny", corpus, "cpu", options=dict(gradAccum=4), steps=5)
    accum.run(5, out=tmp_path / "accum.tinygpt", progress=False)
    rel = max(abs(a - b) / b for (_, a), (_, b) in zip(accum.loss_history, plain.loss_history))
    weights = max(float((p - q).detach().abs().max())
                  for p, q in zip(accum.model.parameters(), plain.model.parameters()))
    print(f"\n--grad-accum 4 vs 1: losses max rel diff {rel:.2e}, weights max abs diff {weights:.2e}")
    assert rel < LOSS_RTOL and weights < WEIGHT_ATOL
    training = tinygpt_file.read_state(tmp_path / "accum.tinygpt").header["training"]
    assert training["gradAccum"] == 4 and "lrSchedule" not in training


def test_lr_schedule_and_refusals():
    cosine = RunOptions(lrSchedule="cosine", warmupSteps=2)
    assert [cosine.lr_multiplier(s, 6) for s in (0, 1, 2, 4)] == [0.5, 1.0, 1.0, 0.5]
    assert cosine.recorded() == {"lrSchedule": "cosine", "warmupSteps": 2}
    assert RunOptions().lr_multiplier(7, 10) == 1.0 and RunOptions().recorded() == {}
    # A resumed run keeps its recorded schedule unless told otherwise.
    assert RunOptions.given({"lrSchedule": "cosine", "warmupSteps": 3, "batch": 16}, gradAccum=None).warmupSteps == 3
    with pytest.raises(ConfigError, match="autocast on CUDA or the CPU"):
        RunOptions(precision="bf16").autocast(torch.device("mps"))
    with pytest.raises(ConfigError, match="unknown --precision"):
        RunOptions(precision="fp8")
    with pytest.raises(ConfigError, match="unknown --lr-schedule"):
        RunOptions(lrSchedule="linear")
