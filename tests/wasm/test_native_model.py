"""wasm/src/model.cpp against PyTorch: whole-model gradients, a 50-step AdamW trajectory, the overfit
gate. Reference data is produced here, by python_ref, at test time."""
import numpy as np
import pytest
import torch

from python_ref.config import DEFAULT_CORPUS, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.model import TinyGPT, manifest
from python_ref.tinygpt_file import CheckpointState, model_from_state, read_state, write_state
from python_ref.train import make_optimizer, train_step
from support.tinygpt_native import NativeModel, state_bytes_of_file


def random_state(config, seed: int) -> CheckpointState:
    """Weights far from the init (noisy LayerNorm gains, non-zero biases) so every path carries signal."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in manifest(config):
        if ".ln" in name or name.startswith("ln_f"):
            base = 1.0 if name.endswith(".weight") else 0.0
            weights[name] = (base + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            weights[name] = (0.08 * rng.standard_normal(shape)).astype(np.float32)
    return CheckpointState(config, 0, weights)


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """max|a - b| / max|b| over one tensor."""
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_gradients_equal_pytorch(tmp_path, n_threads):
    config = model_config("tiny")
    path = tmp_path / "random.tinygpt"
    write_state(path, random_state(config, seed=3))
    rng = np.random.default_rng(4)
    B, T = 4, config.ctx
    x = rng.integers(0, 256, (B, T))
    y = rng.integers(0, 256, (B, T))

    model = model_from_state(read_state(path))
    _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
    loss.backward()
    want = {n: p.grad.numpy() for n, p in model.named_parameters()}

    with NativeModel(config, batch=B, n_threads=n_threads) as m:
        m.import_state(state_bytes_of_file(path))
        got_loss = m.forward_backward(x, y)
        got = m.grads()
    loss_rel = abs(got_loss - loss.item()) / loss.item()
    # k_proj.bias adds q.b_k to every score of a query's softmax row: its exact gradient is zero and
    # both sides hold only rounding noise, so it is compared against its layer's k_proj.weight gradient.
    zero = {n: float(max(np.abs(got[n]).max(), np.abs(want[n]).max()) / np.abs(want[n[:-4] + "weight"]).max())
            for n in want if n.endswith("k_proj.bias")}
    print(f"\nk_proj.bias (exactly zero in exact arithmetic): max |grad| / max |k_proj.weight grad| = "
          f"{max(zero.values()):.1e}")
    assert max(zero.values()) < 1e-4
    errors = {name: max_rel(got[name], want[name]) for name in want if name not in zero}
    worst = max(errors, key=errors.get)
    print(f"\n[{n_threads} thread(s)] loss C++ {got_loss:.7f} PyTorch {loss.item():.7f} rel diff {loss_rel:.2e}; "
          f"worst gradient {worst}: max rel err {errors[worst]:.2e}")
    assert loss_rel < 1e-5
    assert errors[worst] < 1e-4, sorted(errors.items(), key=lambda kv: -kv[1])[:5]


def test_trajectory_parity_50_adamw_steps():
    """Same seed init, the same batches from the portable data stream, 50 AdamW steps of the small preset."""
    preset, steps = "small", 50
    config = model_config(preset)
    train_cfg = train_config(preset)
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    train, _ = corpus.split(train_cfg.valFraction, config.ctx)
    stream = BatchStream(train, config.ctx, train_cfg.batch, train_cfg.seed)

    model = TinyGPT(config, seed=train_cfg.seed)
    opt = make_optimizer(model, train_cfg)  # python_ref's own step: decay on 2-D tensors, clip, AdamW
    ref = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread each side: robust when the shared cores are busy
    try:
        for _ in range(steps):
            x, y = stream.next()
            ref.append(train_step(model, opt, torch.from_numpy(x), torch.from_numpy(y), train_cfg.gradClip))
    finally:
        torch.set_num_threads(threads)

    with NativeModel(config, batch=train_cfg.batch, n_threads=1) as m:
        m.init(train_cfg.seed)
        m.set_hyper_from(train_cfg)
        m.set_corpus(corpus.data, train_cfg.valFraction)
        got = [m.train_step() for _ in range(steps)]
        assert m.batches_drawn == steps and m.step == steps
    rel = np.abs(np.array(got) - ref) / np.array(ref)
    print(f"\n{preset}: losses {ref[0]:.4f} -> {ref[-1]:.4f} (PyTorch), {got[0]:.4f} -> {got[-1]:.4f} (C++); "
          f"max rel diff over {steps} steps {rel.max():.2e} at step {int(rel.argmax()) + 1}")
    assert rel.max() < 1e-3


def test_overfit_gate_one_batch():
    preset, lr = "tiny", 3e-3
    config = model_config(preset)
    train_cfg = train_config(preset)
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_cfg.valFraction, config.ctx)
    x, y = BatchStream(train, config.ctx, train_cfg.batch, train_cfg.seed).next()
    with NativeModel(config, batch=train_cfg.batch, n_threads=2) as m:
        m.init(train_cfg.seed)
        m.set_hyper(lr, train_cfg.beta1, train_cfg.beta2, train_cfg.eps, train_cfg.weightDecay, train_cfg.gradClip)
        losses = []
        for _ in range(300):
            losses.append(m.train_step_batch(x, y))
            if losses[-1] < 0.05:
                break
    print(f"\ntiny, one batch of {train_cfg.batch}x{config.ctx}, lr {lr}: loss {losses[0]:.3f} -> {losses[-1]:.4f} "
          f"after {len(losses)} steps")
    assert losses[-1] < 0.05


def test_thread_count_changes_no_bit():
    """Every kernel splits work so that each sum keeps one order: 1 and 2 threads give the same state."""
    config, train_cfg = model_config("tiny"), train_config("tiny")
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    states = []
    for n_threads in (1, 2):
        with NativeModel(config, batch=train_cfg.batch, n_threads=n_threads) as m:
            m.init(train_cfg.seed)
            m.set_hyper_from(train_cfg)
            m.set_corpus(corpus.data, train_cfg.valFraction)
            losses = [m.train_step() for _ in range(3)]
            states.append((losses, m.export_state(True)))
    (l1, s1), (l2, s2) = states
    diff = np.abs(np.frombuffer(s1[4:], "<f4") - np.frombuffer(s2[4:], "<f4")).max()
    print(f"\n3 steps, 1 vs 2 threads: losses equal={l1 == l2}, state max |diff| {diff:.1e}")
    assert l1 == l2 and s1 == s2
