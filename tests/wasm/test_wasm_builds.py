"""The scalar, SIMD, threads and relaxed WebAssembly builds (scripts/build_wasm.sh) in Node, through the
same JS wrapper the worker uses (site/static/js/wasm_api.js): overfit gate, 50-step trajectory parity
with the native build from the same python_ref init file, export/import round trips with python_ref,
and no growth race (memory.grow while the pool's threads are alive); and the relaxed build, which a
cross-origin isolated Chromium page picks by default, matching the native build there too."""
from __future__ import annotations

import subprocess

import pytest

from python_ref.config import model_config
from python_ref.tinygpt_file import read_state, write_state
from support.wasm_support import (CORPUS, WASM_DIR, chromium_page, max_rel_diff, max_rel_state_diff,
                                  model_spec, native_trajectory, python_init_file, require_build, run_browser,
                                  run_node, static_server)

NODE_BUILDS = ["scalar", "simd", "threads", "relaxed"]  # relaxed: Node runs it with its flag (wasm_support.node_flags)
PARITY_PRESET, PARITY_STEPS = "tiny", 50


def threads_for(build: str) -> int:
    return 2 if build in ("threads", "relaxed") else 1


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """python_ref's init file for the parity preset and the native trajectory from it."""
    tmp = tmp_path_factory.mktemp("wasm-parity")
    seed = model_spec(PARITY_PRESET)["training"]["seed"]
    init_path = tmp / "init.tinygpt"
    init_state = python_init_file(init_path, PARITY_PRESET, seed)
    (tmp / "init.state").write_bytes(init_state)
    losses, final_state = native_trajectory(PARITY_PRESET, init_state, PARITY_STEPS)
    return {"dir": tmp, "init_state_path": tmp / "init.state", "init_state": init_state,
            "losses": losses, "final_state": final_state}


@pytest.mark.parametrize("build", NODE_BUILDS)
def test_overfit_gate_one_batch(build, tmp_path):
    """Tiny preset, one fixed batch, lr 3e-3 (as the python_ref and native gates): loss < 0.05 within
    300 steps."""
    require_build(build)
    spec = model_spec("tiny")
    spec["training"]["lr"] = 3e-3
    spec.update(build=build, threads=threads_for(build), initSeed=spec["training"]["seed"],
                corpus=str(CORPUS), mode="overfit", steps=300, overfitTarget=0.05)
    r = run_node(spec, tmp_path)
    losses = r["losses"]
    print(f"\n{build}: overfit loss {losses[0]:.4f} -> {losses[-1]:.4f} after {len(losses)} steps "
          f"({sum(r['stepMs']) / len(losses):.1f} ms/step, {r['nThreads']} thread(s))")
    assert losses[-1] < 0.05


@pytest.mark.parametrize("build", NODE_BUILDS)
def test_trajectory_matches_native(build, reference, tmp_path):
    """50 corpus steps from python_ref's init file: every loss within 1e-5 relative of the native
    build's; the final states (weights and moments) are printed and compared too."""
    require_build(build)
    spec = model_spec(PARITY_PRESET)
    out = tmp_path / "final.state"
    spec.update(build=build, threads=threads_for(build), initState=str(reference["init_state_path"]),
                corpus=str(CORPUS), mode="steps", steps=PARITY_STEPS, exportState=str(out))
    r = run_node(spec, tmp_path)
    loss_diff = max_rel_diff(r["losses"], reference["losses"])
    state_diff = max_rel_state_diff(out.read_bytes(), reference["final_state"])
    print(f"\n{build} vs native, {PARITY_STEPS} steps of {PARITY_PRESET}: max rel loss diff {loss_diff:.3e}, "
          f"final weights/m/v max diff relative to each block's max {state_diff:.3e} "
          f"(loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, {r['nThreads']} thread(s))")
    assert r["step"] == PARITY_STEPS
    assert loss_diff <= 1e-5


@pytest.mark.parametrize("build", NODE_BUILDS)
def test_state_round_trips_with_python_ref(build, reference, tmp_path):
    """A python_ref file loads here and exports byte for byte; a state this build wrote after
    training becomes a python_ref file that python_ref reads back with the same values."""
    require_build(build)
    cfg = model_config(PARITY_PRESET)
    spec = model_spec(PARITY_PRESET)
    same = tmp_path / "same.state"
    spec.update(build=build, threads=threads_for(build), initState=str(reference["init_state_path"]),
                mode="steps", steps=0, exportState=str(same))
    run_node(spec, tmp_path)
    exported = same.read_bytes()
    # The python init has no moments; the export has them (zeros): compare step + weights exactly.
    n_weights = 4 + 4 * cfg.param_count()
    assert exported[:n_weights] == reference["init_state"][:n_weights]
    assert exported[n_weights:] == bytes(len(exported) - n_weights)

    trained = tmp_path / "trained.state"
    spec.update(corpus=str(CORPUS), steps=3, exportState=str(trained))
    run_node(spec, tmp_path)
    from support.tinygpt_native import checkpoint_from_state
    state = trained.read_bytes()
    path = tmp_path / "from-wasm.tinygpt"
    write_state(path, checkpoint_from_state(cfg, state))
    back = read_state(path)
    raw = path.read_bytes()
    assert back.step == 3 and back.m is not None
    assert raw[12 + int.from_bytes(raw[8:12], "little"):] == state
    print(f"\n{build}: python_ref file -> wasm -> identical export ({len(exported)} bytes); "
          f"wasm state after 3 steps -> python_ref file -> read back identical ({len(state)} bytes)")

    # And back into this build: import the python_ref file's state, export, byte-identical.
    again = tmp_path / "again.state"
    (tmp_path / "file.state").write_bytes(raw[12 + int.from_bytes(raw[8:12], "little"):])
    spec.update(initState=str(tmp_path / "file.state"), corpus=None, steps=0, exportState=str(again))
    run_node(spec, tmp_path)
    assert again.read_bytes() == state


def test_memory_growth_while_pool_threads_live(reference, tmp_path):
    """Threads build, 2 threads: after the first step a second model with a ~96 MB arena is created,
    growing WebAssembly memory (initially 16 MB) while the first model's pool threads are alive.
    Training then continues and every loss equals the run without growth, bit for bit."""
    require_build("threads")
    spec = model_spec(PARITY_PRESET)
    spec.update(build="threads", threads=2, initState=str(reference["init_state_path"]), corpus=str(CORPUS),
                mode="steps", steps=6)
    plain = run_node(spec, tmp_path)
    grown = run_node(dict(spec, growBytes=96 * 2**20), tmp_path)
    g = grown["growth"]
    print(f"\nmemory {g['before'] / 2**20:.0f} MiB -> {g['after'] / 2**20:.0f} MiB while the pool ran "
          f"(second arena {g['arenaBytes'] / 2**20:.0f} MiB); losses with/without growth: "
          f"max |diff| {max(abs(a - b) for a, b in zip(grown['losses'], plain['losses'])):.1e}")
    assert g["after"] > g["before"] and grown["nThreads"] == 2
    assert grown["losses"] == plain["losses"]


@pytest.mark.parametrize("flag, valid", [([], False), (["--experimental-wasm-relaxed-simd"], True)])
def test_relaxed_build_really_uses_relaxed_simd(flag, valid):
    """The relaxed build must contain relaxed-SIMD instructions (else it is the threads build under
    another name): Node 20 rejects its module without the flag and accepts it with it."""
    require_build("relaxed")
    wasm = WASM_DIR / "relaxed" / "tinygpt.wasm"
    js = f"console.log(WebAssembly.validate(require('fs').readFileSync({str(wasm)!r})))"
    out = subprocess.run(["node", *flag, "-e", js], capture_output=True, text=True, timeout=60).stdout.strip()
    print(f"\nnode {' '.join(flag) or '(no flag)'}: WebAssembly.validate(relaxed/tinygpt.wasm) = {out}")
    assert out == ("true" if valid else "false")


@pytest.mark.browser
def test_relaxed_build_in_chromium_matches_native(reference):
    """What a cross-origin isolated Chromium page gets by default: the loader's own choice (no build
    requested) is the relaxed build, and its 50 corpus steps from python_ref's init file match the
    native build's losses within 1e-5 relative, as in Node."""
    require_build("relaxed")
    spec = model_spec(PARITY_PRESET)
    spec.update(initState="/files/init.state", corpus="/site/static/data/tinyshakespeare.txt", mode="steps",
                steps=PARITY_STEPS)
    with static_server(isolated=True, files_dir=reference["dir"]) as url, chromium_page(url) as page:
        r = run_browser(page, spec)
    loss_diff = max_rel_diff(r["losses"], reference["losses"])
    print(f"\nChromium, loader's choice {r['build']} ({r['threads']} threads) vs native, {PARITY_STEPS} steps of "
          f"{PARITY_PRESET}: max rel loss diff {loss_diff:.3e}; {r['reason']}")
    if r["features"]["cores"] > 1:
        assert r["build"] == "relaxed"
    assert r["step"] == PARITY_STEPS and loss_diff <= 1e-5
