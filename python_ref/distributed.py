"""Data-parallel training under torchrun: one process per device, the same trajectory as one process.

Every rank draws the *global* batch from the portable data stream exactly as a single process would
and keeps its contiguous shard of rows, so the data state (batches drawn) stays global and a
checkpoint resumes at any world size. DDP averages gradients over ranks; with equal shards the
average of the rank means is the mean over the whole batch, i.e. the single-process gradient.
"""
from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import REPO_ROOT, ConfigError

# torchrun sets these for each worker; their presence is what "running under torchrun" means.
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
DEFAULT_TIMEOUT_S = 600


class DistributedError(RuntimeError):
    """The process group could not be joined (a rank missing, an address unreachable)."""


@dataclass(frozen=True)
class Distributed:
    """This process's place in the run; world_size 1 without torchrun (no process group, no collectives)."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def active(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rank_rows(self, batch: int, grad_accum: int = 1) -> slice:
        """Rows [r*B/N, (r+1)*B/N) of the global batch; refuses a batch that does not split evenly."""
        if batch % (self.world_size * grad_accum):
            raise ConfigError(
                f"--batch {batch} is not divisible by world size {self.world_size} x grad-accum {grad_accum} "
                f"= {self.world_size * grad_accum}: every rank and micro-batch needs the same number of rows "
                f"(equal shards keep the averaged gradient equal to the single-process one)")
        per_rank = batch // self.world_size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP over the process group (it averages gradients at backward); the model itself when alone."""
        if not self.active:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def agree(self, loss: float, stop_requested: bool) -> tuple[float, bool]:
        """One collective per step: the global mean loss, and whether any rank was asked to stop."""
        if not self.active:
            return loss, stop_requested
        t = torch.tensor([loss, float(stop_requested)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t[0].item() / self.world_size, t[1].item() > 0

    def barrier(self) -> None:
        if not self.active:
            return
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])  # NCCL needs to know the GPU this rank uses
        else:
            dist.barrier()

    def close(self) -> None:
        if self.active:
            dist.destroy_process_group()


def under_torchrun() -> bool:
    return all(k in os.environ for k in TORCHRUN_ENV)


def init_from_env(device: torch.device, timeout_s: float = DEFAULT_TIMEOUT_S) -> Distributed:
    """Join torchrun's process group (NCCL on CUDA, gloo otherwise); a lone process gets world size 1."""
    if not under_torchrun():
        return Distributed(device=device)
    rank, world, local = (int(os.environ[k]) for k in TORCHRUN_ENV)
    if device.type == "cuda":
        device = torch.device("cuda", local)  # one GPU per process, picked by the rank on this machine
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ConfigError(f"distributed training runs on cuda or cpu, not {device.type}")
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError) as e:  # DistStoreError and friends derive from RuntimeError
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        raise DistributedError(
            f"rank {rank} of {world} could not join the {backend} process group at {where} within "
            f"{timeout_s:g} s ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r}); "
            f"are all ranks started and is the address reachable? (--dist-timeout sets the wait)") from None
    return Distributed(rank, world, local, device)


def torchrun_command(nproc: int, train_argv: list[str]) -> list[str]:
    """torchrun for one machine (--standalone picks a free rendezvous port) around `train <train_argv>`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "python_ref.cli", "train", *train_argv]


def launch_local(nproc: int, train_argv: list[str]) -> int:
    """Run torchrun and wait for it; its exit status is ours (a signal death reads as 128 + signal)."""
    if nproc < 1:
        raise ConfigError(f"--nproc must be at least 1, got {nproc}")
    env = dict(os.environ)
    # The workers import python_ref from this checkout whatever the working directory is.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(torchrun_command(nproc, train_argv), env=env)
    # A SIGTERM meant for us goes to torchrun, which passes it on to its workers (stop at a step boundary, save).
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                code = proc.wait()
                return code if code >= 0 else 128 - code
            except KeyboardInterrupt:
                continue  # Ctrl-C reached torchrun and its workers too: wait while they stop and save
    finally:
        signal.signal(signal.SIGTERM, previous)
