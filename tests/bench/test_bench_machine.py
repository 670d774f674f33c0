"""bench/machine.py: the device line of a benchmark file names the CPU as lscpu does, its
cores, the GPU with its driver first where there is one, and the runtimes that gave figures."""
from __future__ import annotations

from bench.machine import cpu_description, cpu_model, device_line, usable_cpus


def test_cpu_is_named_with_its_cores():
    text = cpu_description()
    print(text)
    assert text.startswith(cpu_model()) and f"{usable_cpus()} logical CPUs" in text


def test_device_line_puts_the_gpu_and_driver_first():
    machine = {"cpu": "Intel Xeon, 16 logical CPUs", "torch": "2.11.0+cu130", "node": "v20.20.2", "chromium": None,
               "gpu": {"name": "NVIDIA H200", "driver": "580.159.04"}}
    line = device_line(machine)
    print(line)
    assert line == "NVIDIA H200 (driver 580.159.04); Intel Xeon, 16 logical CPUs; PyTorch 2.11.0+cu130, Node v20.20.2"
    assert device_line(dict(machine, gpu=None, node=None)) == "Intel Xeon, 16 logical CPUs; PyTorch 2.11.0+cu130"
