"""The machine a benchmark ran on, named as precisely as the system names it: a figure without its
hardware means nothing. The CPU as `lscpu` gives it (family and model too, since a KVM guest may be
named only "AMD EPYC"), the GPU and its driver as nvidia-smi gives them, and the versions of every
runtime that produced a figure (PyTorch, Node, Chromium)."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess


def _run(*argv: str) -> str:
    """The command's stdout, stripped; "" when it is missing or fails."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def usable_cpus() -> int:
    """The cores this process may run on (a container or taskset may allow fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _lscpu() -> dict[str, str]:
    fields = {}
    for line in _run("lscpu").splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    return _lscpu().get("Model name") or platform.processor() or "unknown CPU"


def cpu_description() -> str:
    """e.g. "AMD EPYC (family 25 model 17), 2 logical CPUs, AVX-512, KVM guest"."""
    info = _lscpu()
    name = info.get("Model name") or platform.processor() or "unknown CPU"
    if "family" not in name.lower() and info.get("CPU family") and info.get("Model"):
        name += f" (family {info['CPU family']} model {info['Model']})"
    flags = set(info.get("Flags", "").split())
    simd = next((label for flag, label in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("asimd", "NEON"))
                 if flag in flags), None)
    parts = [name, f"{usable_cpus()} logical CPUs", simd]
    if info.get("Hypervisor vendor"):
        parts.append(f"{info['Hypervisor vendor']} guest")
    return ", ".join(p for p in parts if p)


def gpu_description() -> dict | None:
    """{"name", "driver", "max_sm_clock"} of the first CUDA GPU, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    out = _run("nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader")
    fields = [f.strip() for f in out.splitlines()[0].split(",")] if out else []
    return {"name": torch.cuda.get_device_name(0), "driver": fields[1] if len(fields) > 1 else None,
            "max_sm_clock": fields[2] if len(fields) > 2 else None, "cuda": torch.version.cuda}


def node_version() -> str | None:
    return (_run("node", "--version") or None) if shutil.which("node") else None


def chromium_version() -> str | None:
    # Debian's wrapper script prints shell noise on stderr; the version is the first line of stdout
    text = _run("chromium", "--version") if shutil.which("chromium") else ""
    match = re.search(r"Chromium [\d.]+", text)
    return match[0] if match else None


def describe_machine() -> dict:
    import torch

    return {"cpu": cpu_description(), "logical_cpus": usable_cpus(), "gpu": gpu_description(),
            "torch": torch.__version__, "node": node_version(), "chromium": chromium_version(),
            "python": platform.python_version(), "os": platform.platform()}


def device_line(machine: dict) -> str:
    """The one-line device name of a benchmark file: the GPU with its driver first where there is one."""
    parts = []
    if gpu := machine.get("gpu"):
        parts.append(gpu["name"] + (f" (driver {gpu['driver']})" if gpu.get("driver") else ""))
    parts.append(machine["cpu"])
    runtimes = [f"PyTorch {machine['torch']}"]
    runtimes += [f"Node {machine['node']}"] if machine.get("node") else []
    runtimes += [machine["chromium"]] if machine.get("chromium") else []
    return "; ".join(parts) + "; " + ", ".join(runtimes)
