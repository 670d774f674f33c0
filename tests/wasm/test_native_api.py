"""wasm/src/tinygpt_api.cpp under AddressSanitizer + UBSan: bad input gets an error code and a message,
never a crash, a leak or undefined behaviour (wasm/tests/test_api.cpp)."""
import os
import subprocess

import pytest

from python_ref.config import ModelConfig
from support.tinygpt_native import NATIVE, NativeError, NativeModel, ensure_built


def test_bad_input_under_asan_and_ubsan():
    ensure_built()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    run = subprocess.run([NATIVE / "test_api_asan"], capture_output=True, text=True, timeout=300, env=env)
    print(run.stdout + run.stderr)
    assert run.returncode == 0 and "PASS: 0 failure(s)" in run.stdout
    # (ASan warns on stderr about the refused ~3 TB arena: that refusal is the point of that case)
    assert "runtime error" not in run.stderr and "ERROR: AddressSanitizer" not in run.stderr
    assert "LeakSanitizer" not in run.stderr


def test_errors_reach_python_with_their_message():
    with pytest.raises(NativeError) as e:
        NativeModel(ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=8), batch=0)
    print(e.value)
    assert e.value.code == -1 and "batch" in str(e.value)
    with NativeModel(ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=8), batch=2) as m:
        with pytest.raises(NativeError) as e:
            m.set_hyper(float("nan"), 0.9, 0.95, 1e-8, 0.1, 1.0)
        print(e.value)
        assert e.value.code == -4 and "lr" in str(e.value)
        with pytest.raises(NativeError) as e:
            m.import_state(b"\0" * 17)
        print(e.value)
        assert e.value.code == -3 and "length" in str(e.value)


def test_a_negative_adamw_v_is_refused_and_the_model_kept():
    """v is a mean of squares: importing a negative one would make the next step take its square root."""
    import numpy as np
    with NativeModel(ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=8), batch=2) as m:
        m.init(3)
        before = m.export_state()
        floats = np.frombuffer(before[4:], dtype="<f4").copy()
        floats[2 * m.P + 5] = -1e-6
        with pytest.raises(NativeError) as e:
            m.import_state(before[:4] + floats.tobytes())
        print(e.value)
        assert e.value.code == -3 and "negative value in AdamW v of token_embedding.weight" in str(e.value)
        assert m.export_state() == before


def test_manifest_and_sizes_follow_the_format():
    from python_ref.tinygpt_file import manifest_entries
    config = ModelConfig(nLayer=2, nHead=2, dModel=8, ctx=6)
    with NativeModel(config, batch=3, n_threads=2) as m:
        got = m.manifest()
        want = [(e["name"], e["offset"], int(__import__("math").prod(e["shape"]))) for e in manifest_entries(config)]
        assert got == want
        assert m.P == config.param_count()
        assert m.state_size(False) == 4 + 4 * m.P and m.state_size(True) == 4 + 12 * m.P
    print(f"manifest of {len(got)} tensors equals python_ref's; P = {config.param_count()}")


def test_no_allocation_inside_steps_eval_generation_or_state_copies():
    """The one-arena rule (wasm/tests/test_no_alloc.cpp counts every malloc and operator new)."""
    ensure_built()
    run = subprocess.run([NATIVE / "test_no_alloc"], capture_output=True, text=True, timeout=300)
    print(run.stdout + run.stderr)
    assert run.returncode == 0 and "PASS" in run.stdout
