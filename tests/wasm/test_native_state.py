"""wasm/src/state.cpp: the .tinygpt state layout both ways between C++ and python_ref."""
import struct

import numpy as np
import torch

from python_ref.config import DEFAULT_CORPUS, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.evaluate import val_windows_loss
from python_ref.tinygpt_file import model_from_state, read_state, save, write_state
from python_ref.model import TinyGPT
from support.tinygpt_native import NativeModel, checkpoint_from_state, state_bytes_of_file

PRESET = "tiny"


def trained_native(steps: int = 3) -> NativeModel:
    config, train_cfg = model_config(PRESET), train_config(PRESET)
    m = NativeModel(config, batch=train_cfg.batch)
    m.init(11)
    m.set_hyper_from(train_cfg)
    m.set_corpus(Corpus.from_file(DEFAULT_CORPUS).data, train_cfg.valFraction)
    for _ in range(steps):
        m.train_step()
    return m


def fixed_batch():
    config, train_cfg = model_config(PRESET), train_config(PRESET)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, config.ctx)
    return BatchStream(train, config.ctx, 4, seed=99).next()


def test_export_import_export_is_byte_identical():
    with trained_native() as a:
        for with_moments in (True, False):
            first = a.export_state(with_moments)
            assert len(first) == a.state_size(with_moments) == 4 + 4 * a.P * (3 if with_moments else 1)
            with NativeModel(a.config, batch=a.batch) as b:
                b.import_state(first)
                second = b.export_state(with_moments)
            print(f"with_moments={with_moments}: {len(first)} bytes, identical={first == second}")
            assert first == second


def test_python_file_loads_in_cpp_with_equal_loss(tmp_path):
    config = model_config(PRESET)
    torch.manual_seed(0)
    model = TinyGPT(config, seed=21)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = fixed_batch()
    for _ in range(2):  # so that the file carries real AdamW moments and step 2
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path / "from_python.tinygpt"
    save(path, model, opt, step=2)
    with torch.no_grad():
        _, want = model(torch.from_numpy(x), torch.from_numpy(y))
    state = state_bytes_of_file(path)
    with NativeModel(config, batch=4) as m:
        m.import_state(state)
        got = m.forward_loss(x, y)
        assert m.step == 2
        assert m.export_state(True) == state  # weights, m, v and step all came through unchanged
    rel = abs(got - want.item()) / want.item()
    print(f"python file -> C++: loss {got:.7f} vs PyTorch {want.item():.7f}, rel diff {rel:.1e}")
    assert rel < 1e-5


def test_cpp_export_is_readable_by_python_ref(tmp_path):
    x, y = fixed_batch()
    with trained_native() as m:
        state = m.export_state(True)
        want = m.forward_loss(x, y)
        config = m.config
    path = tmp_path / "from_cpp.tinygpt"
    write_state(path, checkpoint_from_state(config, state))  # python's header around C++'s state bytes
    back = read_state(path)  # checks CRCs, manifest, lengths, finiteness
    assert back.step == 3 and back.m is not None
    assert state_bytes_of_file(path) == state
    model = model_from_state(back)
    with torch.no_grad():
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
    rel = abs(loss.item() - want) / want
    print(f"C++ state -> python_ref: loss {loss.item():.7f} vs C++ {want:.7f}, rel diff {rel:.1e}")
    assert rel < 1e-5


def test_float16_file_loads_in_cpp_as_float32_state_with_equal_eval_loss(tmp_path):
    """The core takes float32 state only: python_ref widens a float16 file, tg_import_state takes that."""
    config, train_cfg = model_config(PRESET), train_config(PRESET)
    model = TinyGPT(config, seed=21)
    path = tmp_path / "compact.tinygpt"
    save(path, model, step=7, dtype="float16")
    state = read_state(path)
    assert state.header["weightsDtype"] == "float16"
    names = list(state.weights)
    float32_state = struct.pack("<i", state.step) + b"".join(state.weights[n].astype("<f4").tobytes() for n in names)
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    _, val = corpus.split(train_cfg.valFraction, config.ctx)
    want = val_windows_loss(model_from_state(state), val, train_cfg.evalWindows)  # the same float16-rounded weights
    with NativeModel(config, batch=train_cfg.batch) as m:
        m.import_state(float32_state)
        assert m.step == 7 and m.export_state(False) == float32_state
        m.set_corpus(corpus.data, train_cfg.valFraction)
        got = m.eval(train_cfg.evalWindows)
    print(f"float16 file -> float32 state -> C++: eval loss {got:.7f} vs python_ref {want:.7f}, "
          f"|diff| {abs(got - want):.1e}")
    assert abs(got - want) < 1e-5


def test_resume_from_exported_state_continues_the_same_trajectory():
    """state + data state (seed, batchesDrawn) is all exact resume needs: 3+2 steps == 5 steps."""
    with trained_native(5) as straight:
        want = straight.export_state(True)
    with trained_native(3) as first:
        state, drawn = first.export_state(True), first.batches_drawn
    config, train_cfg = model_config(PRESET), train_config(PRESET)
    with NativeModel(config, batch=train_cfg.batch) as resumed:
        resumed.import_state(state)
        resumed.set_hyper_from(train_cfg)
        resumed.set_corpus(Corpus.from_file(DEFAULT_CORPUS).data, train_cfg.valFraction)
        resumed.set_data_state(11, drawn)
        for _ in range(2):
            resumed.train_step()
        got = resumed.export_state(True)
    diff = np.abs(np.frombuffer(got[4:], "<f4") - np.frombuffer(want[4:], "<f4")).max()
    print(f"resumed after 3 of 5 steps: state identical={got == want}, max |diff| {diff:.1e}")
    assert got == want
