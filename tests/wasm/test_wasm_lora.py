"""LoRA in the WebAssembly builds (the engine the page runs on the CPU), in Node through the worker's
JS wrapper and bench/wasm/scenario.mjs: the same fine-tuning steps as the native core from the same
python_ref base, adapters and batches, and the adapter state they export."""
from __future__ import annotations

import numpy as np
import pytest

from python_ref.config import model_config, train_config
from python_ref.lora import TARGETS, LoRAConfig, lora_defaults, target_mask
from support.tinygpt_native import NativeModel, ensure_built
from support.wasm_support import CORPUS, model_spec, python_init_file, require_build, run_node

PRESET, STEPS = "tiny", 20
LORA = LoRAConfig(rank=4, alpha=8, targets=TARGETS, seed=3)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """python_ref's base file and the native core's LoRA losses and adapter state from it."""
    tmp = tmp_path_factory.mktemp("wasm-lora")
    init_state = python_init_file(tmp / "base.tinygpt", PRESET, train_config(PRESET).seed)
    (tmp / "base.state").write_bytes(init_state)
    ensure_built()
    t = train_config(PRESET)
    with NativeModel(model_config(PRESET), t.batch, 1, lora=LORA) as m:
        m.import_state(init_state)
        m.lora_init()
        m.set_hyper(lora_defaults()["lr"], t.beta1, t.beta2, t.eps, lora_defaults()["weightDecay"], t.gradClip)
        m.set_corpus(CORPUS.read_bytes(), t.valFraction)
        m.set_data_state(t.seed, 0)
        losses = [m.train_step() for _ in range(STEPS)]
        return {"dir": tmp, "losses": losses, "state": m.lora_export(True)}


@pytest.mark.parametrize("build", ["scalar", "relaxed"])
def test_lora_steps_equal_the_native_cores(build, reference, tmp_path):
    require_build(build)
    spec = model_spec(PRESET)
    spec["training"].update(lr=lora_defaults()["lr"], weightDecay=lora_defaults()["weightDecay"])
    spec.update(build=build, threads=2 if build == "relaxed" else 1, initState=str(reference["dir"] / "base.state"),
                corpus=str(CORPUS), mode="steps", steps=STEPS, exportLora=str(tmp_path / "adapters.state"),
                lora={"rank": LORA.rank, "alpha": LORA.alpha, "targets": target_mask(LORA.targets),
                      "seed": LORA.seed})
    out = run_node(spec, tmp_path)
    want = np.array(reference["losses"])
    rel = np.abs(np.array(out["losses"]) - want) / want
    got_state = (tmp_path / "adapters.state").read_bytes()
    a = np.frombuffer(got_state[4:], "<f4").astype(np.float64)
    b = np.frombuffer(reference["state"][4:], "<f4").astype(np.float64)
    Q = out["loraParamCount"]
    adapter_diff = np.abs(a[:Q] - b[:Q]).max() / np.abs(b[:Q]).max()
    print(f"\n{build}: {STEPS} LoRA steps (every target, r={LORA.rank}) vs native: losses {want[0]:.4f} -> "
          f"{want[-1]:.4f}, max rel diff {rel.max():.1e}; adapters max rel diff {adapter_diff:.1e}; "
          f"LoRA arena {out['arenaBytes']:,} bytes")
    assert got_state[:4] == reference["state"][:4] and len(got_state) == len(reference["state"])
    assert rel.max() < 1e-5 and adapter_diff < 1e-4
