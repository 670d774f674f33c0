"""LoRA in the C++ core (wasm/src/lora.h, tg_create_lora) against python_ref (python_ref/lora.py,
finetune.py): the kernels' finite-difference check, the portable adapter init bit for bit, the
adapters' gradients against PyTorch autograd, 50 fine-tuning steps side by side, exact resume, the
adapter and merged files both ways, merge and unmerge, sampling with and without the adapters, and
the arena of a LoRA model (no base gradients or moments)."""
import ctypes as C
import subprocess

import numpy as np
import pytest
import torch

from python_ref.config import DEFAULT_CORPUS, init_std, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.finetune import lora_train_config, new_finetune
from python_ref.lora import (
    TARGETS, LoRA, LoRAConfig, adapter_manifest, initial_adapter_values, load_adapter, make_adapter_optimizer,
    read_adapter, save_adapter,
)
from python_ref.model import TinyGPT, manifest
from python_ref.sample import generate
from python_ref.tinygpt_file import CheckpointState, load, model_from_state, read_state, save, write_state
from support.tinygpt_native import (
    NATIVE, NativeModel, binding, checkpoint_from_state, ensure_built, lib, lora_struct, state_bytes_of_file,
)


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """max|a - b| / max|b| over one tensor."""
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def random_weights(config, seed: int, spread: float = 0.08) -> CheckpointState:
    """Weights far from the init (noisy LayerNorm gains, non-zero biases) so every path carries signal."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in manifest(config):
        if ".ln" in name or name.startswith("ln_f"):
            base = 1.0 if name.endswith(".weight") else 0.0
            weights[name] = (base + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            weights[name] = (spread * rng.standard_normal(shape)).astype(np.float32)
    return CheckpointState(config, 0, weights)


def adapter_state(lora: LoRA, step: int = 0, optimizer=None) -> bytes:
    """The C API's adapter state of a python_ref LoRA: i32 step | adapters | [m | v]."""
    blocks = [[t.detach().numpy() for _, t in lora.named_adapters()]]
    if optimizer is not None:
        blocks += [[optimizer.state[t]["exp_avg"].numpy() for _, t in lora.named_adapters()],
                   [optimizer.state[t]["exp_avg_sq"].numpy() for _, t in lora.named_adapters()]]
    return np.int32(step).tobytes() + b"".join(a.astype("<f4").tobytes() for block in blocks for a in block)


def perturbed(lora: LoRA, scale: float = 0.1) -> LoRA:
    """B away from zero, so that every adapter carries signal (and A gets a gradient)."""
    with torch.no_grad():
        for t in lora.lora_B:
            t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(t.numel())) * scale)
    return lora


@pytest.fixture(scope="module")
def random_base(tmp_path_factory):
    path = tmp_path_factory.mktemp("lora") / "random.tinygpt"
    write_state(path, random_weights(model_config("tiny"), seed=3))
    return path


def test_lora_kernels_match_finite_differences():
    ensure_built()
    run = subprocess.run([NATIVE / "test_lora"], capture_output=True, text=True, timeout=300)
    print(run.stdout + run.stderr)
    errors = {}
    for line in run.stdout.splitlines():
        if "max_rel_err" in line:
            what = line.split()[-6]
            errors[what] = max(errors.get(what, 0.0), float(line.split("max_rel_err")[1].split()[0]))
    print("largest max relative error per gradient / check: "
          + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    assert run.returncode == 0 and "PASS" in run.stdout


def test_manifest_and_init_are_python_refs_bit_for_bit():
    config = model_config("tiny")
    lc = LoRAConfig(rank=3, alpha=6, targets=TARGETS, seed=11)
    with NativeModel(config, batch=2, lora=lc) as m:
        got_manifest = [(n, numel) for n, _, numel in m.lora_manifest()]
        assert got_manifest == [(n, int(np.prod(s))) for n, s in adapter_manifest(config, lc)]
        assert m.Q == sum(numel for _, numel in got_manifest)
        m.lora_init()
        got = m.lora_weights()
    want = dict(initial_adapter_values(config, lc))
    assert all(np.array_equal(got[n], want[n]) for n in want)
    print(f"\n{len(want)} adapter tensors ({sum(a.size for a in want.values())} floats) equal python_ref's "
          f"init bit for bit")


@pytest.mark.parametrize("targets", [TARGETS, ("q_proj", "v_proj"), ("o_proj",), ("fc_in",), ("fc_out",)])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_adapter_gradients_equal_pytorch(random_base, targets, n_threads):
    """tg_forward_backward's adapter gradients against autograd's, every target alone and together
    (the lowest layer skips what only its input would need, differently for each)."""
    config = model_config("tiny")
    lc = LoRAConfig(rank=4, alpha=8, targets=targets, seed=5)
    lora = perturbed(LoRA(model_from_state(read_state(random_base)), lc))
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 256, (4, config.ctx)), rng.integers(0, 256, (4, config.ctx))
    _, loss = lora(torch.from_numpy(x), torch.from_numpy(y))
    loss.backward()
    want = {n: t.grad.numpy() for n, t in lora.named_adapters()}
    with NativeModel(config, batch=4, n_threads=n_threads, lora=lc) as m:
        m.import_state(state_bytes_of_file(random_base))
        m.lora_import(adapter_state(lora))
        got_loss = m.forward_backward(x, y)
        got = m.lora_grads()
    errors = {n: max_rel(got[n], want[n]) for n in want}
    worst = max(errors, key=errors.get)
    loss_rel = abs(got_loss - loss.item()) / loss.item()
    print(f"\n{','.join(targets)} [{n_threads} thread(s)]: loss rel diff {loss_rel:.1e}; worst adapter gradient "
          f"{worst}: max rel err {errors[worst]:.2e}")
    assert loss_rel < 1e-6
    assert errors[worst] < 1e-4


def small_finetune(tmp_path, targets, steps):
    """A fine-tune of the small preset's seed-init base: python_ref's FineTuneRun for `steps` steps."""
    config, preset = model_config("small"), "small"
    base = tmp_path / "base.tinygpt"
    save(base, TinyGPT(config, seed=train_config(preset).seed), preset=preset)
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    run = new_finetune(base, corpus, "cpu", rank=8, alpha=16, targets=targets, evalEvery=0)
    return base, corpus, run


def native_finetune(base, corpus, run, n_threads=1) -> NativeModel:
    """The C++ core set up as python_ref's fine-tune: base imported, adapters from the same init stream,
    the same AdamW settings and data stream."""
    t = run.train_cfg
    m = NativeModel(run.model.config, t.batch, n_threads, lora=run.lora.config)
    m.import_state(state_bytes_of_file(base))
    m.lora_init()
    m.set_hyper_from(t)
    m.set_corpus(corpus.data, t.valFraction)
    m.set_data_state(t.seed, 0)
    return m


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), TARGETS])
def test_fifty_steps_equal_python_ref(tmp_path, targets):
    """50 fine-tuning steps from the same base, adapters and batches: losses within 1e-5 relative,
    the adapters after them close, and the validation loss with them."""
    steps = 50
    base, corpus, run = small_finetune(tmp_path, targets, steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run.run(steps, progress=False)
    finally:
        torch.set_num_threads(threads)
    ref = np.array([loss for _, loss in run.loss_history])
    with native_finetune(base, corpus, run) as m:
        got = np.array([m.train_step() for _ in range(steps)])
        assert m.step == steps and m.batches_drawn == steps
        adapters = m.lora_weights()
        val = m.eval(run.train_cfg.evalWindows)
    rel = np.abs(got - ref) / ref
    want = {n: t.detach().numpy() for n, t in run.lora.named_adapters()}
    adapter_err = {n: max_rel(adapters[n], want[n]) for n in want}
    worst = max(adapter_err, key=adapter_err.get)
    val_ref = run.val_history[-1][1]
    print(f"\nsmall, LoRA r=8 alpha=16 on {','.join(run.lora.config.targets)}: losses {ref[0]:.4f} -> {ref[-1]:.4f} "
          f"(python_ref), {got[0]:.4f} -> {got[-1]:.4f} (C++); max rel loss diff over {steps} steps {rel.max():.2e} "
          f"at step {int(rel.argmax()) + 1}; adapters after {steps} steps: worst {worst} max rel diff "
          f"{adapter_err[worst]:.2e}; val loss {val_ref:.6f} vs {val:.6f} (rel {abs(val - val_ref) / val_ref:.1e})")
    assert ref[-1] < ref[0] - 0.2  # the adapters learn
    assert rel.max() < 1e-5
    assert adapter_err[worst] < 1e-3
    assert abs(val - val_ref) / val_ref < 1e-5


def test_exact_resume_is_bit_identical(tmp_path):
    """25 steps, export the adapter state (with moments) and data state, import into a fresh model,
    25 more: the 50 losses and the final adapter state equal an uninterrupted run's bit for bit."""
    base, corpus, run = small_finetune(tmp_path, ("q_proj", "v_proj", "fc_out"), 0)
    with native_finetune(base, corpus, run, n_threads=2) as m:
        straight = [m.train_step() for _ in range(50)]
        final = m.lora_export(True)
    with native_finetune(base, corpus, run, n_threads=2) as m:
        first = [m.train_step() for _ in range(25)]
        saved, drawn = m.lora_export(True), m.batches_drawn
    with native_finetune(base, corpus, run, n_threads=2) as m:
        m.lora_import(saved)
        m.set_data_state(run.train_cfg.seed, drawn)
        second = [m.train_step() for _ in range(25)]
        resumed = m.lora_export(True)
        assert m.step == 50
    diff = np.abs(np.array(first + second) - straight).max()
    print(f"\n25 + 25 resumed vs 50 uninterrupted: losses max |diff| {diff}, adapter state (step, adapters, m, v) "
          f"identical: {resumed == final}")
    assert first + second == straight and resumed == final


def test_adapter_and_merged_files_load_in_python_ref(tmp_path, random_base):
    """What the page writes from the core: the adapter file (the exported state, with the step in the
    header) and the merged model (tg_lora_merge, then the weights-only state) load in python_ref and
    give the core's losses; a wrong base is refused with the reason."""
    config = model_config("tiny")
    lc = LoRAConfig(rank=4, alpha=8, targets=("q_proj", "k_proj", "fc_in"), seed=7)
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    t = lora_train_config(8, lr=3e-3)
    x, y = BatchStream(corpus.split(0.1, config.ctx)[1], config.ctx, 8, 99).next()
    with NativeModel(config, 8, 2, lora=lc) as m:
        m.import_state(state_bytes_of_file(random_base))
        m.lora_init()
        m.set_hyper_from(t)
        m.set_corpus(corpus.data, t.valFraction)
        m.set_data_state(t.seed, 0)
        for _ in range(10):
            m.train_step()
        state, adapted_loss = m.lora_export(True), m.forward_loss(x, y)
        m.lora_merge()
        merged_state, merged_loss = m.export_state(False), m.forward_loss(x, y)
        m.lora_unmerge()
        unmerged = m.weights()
    # the adapter file, as the page writes it: python_ref's writer on the core's arrays
    Q = sum(int(np.prod(s)) for _, s in adapter_manifest(config, lc))
    step = int(np.frombuffer(state[:4], "<i4")[0])
    flat = np.frombuffer(state[4:], "<f4").copy()
    lora = LoRA(model_from_state(read_state(random_base)), lc)
    optimizer = make_adapter_optimizer(lora, t)
    offsets = np.cumsum([0] + [int(np.prod(s)) for _, s in adapter_manifest(config, lc)])
    with torch.no_grad():
        for i, (_, a) in enumerate(lora.named_adapters()):
            a.copy_(torch.from_numpy(flat[offsets[i]:offsets[i + 1]].reshape(a.shape)))
            optimizer.state[a] = {"step": torch.tensor(float(step)),
                                  "exp_avg": torch.from_numpy(flat[Q + offsets[i]:Q + offsets[i + 1]].reshape(a.shape)),
                                  "exp_avg_sq": torch.from_numpy(flat[2 * Q + offsets[i]:2 * Q + offsets[i + 1]]
                                                                 .reshape(a.shape))}
    save_adapter(tmp_path / "a.tgla", lora, optimizer)
    adapter = read_adapter(tmp_path / "a.tgla")
    assert adapter.step == 10 and adapter.m is not None
    assert adapter_state(lora, adapter.step, optimizer) == state  # the file's data is the core's state
    # python_ref attaches the file to the base and gets the core's loss
    model, _ = load(random_base)
    back = load_adapter(tmp_path / "a.tgla", model)
    with torch.no_grad():
        py_adapted = back(torch.from_numpy(x), torch.from_numpy(y))[1].item()
    # the merged model, a plain .tinygpt from the core's state: no LoRA code needed to load it
    write_state(tmp_path / "merged.tinygpt", checkpoint_from_state(config, merged_state))
    plain, _ = load(tmp_path / "merged.tinygpt")
    with torch.no_grad():
        py_merged = plain(torch.from_numpy(x), torch.from_numpy(y))[1].item()
        py_merged_weights = back.merged_weights()
    merged_diff = max(float(np.abs(plain.state_dict()[n].numpy() - w).max()) for n, w in py_merged_weights.items())
    base_w = read_state(random_base).weights
    unmerge_diff = max(float(np.abs(unmerged[n] - base_w[n]).max()) for n in base_w)
    print(f"\nadapter file: python_ref loss {py_adapted:.7f} vs core {adapted_loss:.7f} "
          f"(rel {abs(py_adapted - adapted_loss) / adapted_loss:.1e}); merged .tinygpt: python_ref {py_merged:.7f} "
          f"vs core {merged_loss:.7f} (rel {abs(py_merged - merged_loss) / merged_loss:.1e}); core's merged weights "
          f"vs python_ref's merge max |diff| {merged_diff:.1e}; unmerge gives the base back within {unmerge_diff:.1e}")
    assert abs(py_adapted - adapted_loss) / adapted_loss < 1e-5
    assert abs(py_merged - merged_loss) / merged_loss < 1e-5
    assert abs(py_merged - py_adapted) / py_adapted < 1e-5
    assert merged_diff < 1e-6 and unmerge_diff < 1e-6
    # the adapter on another base: refused, naming the hashes
    other = tmp_path / "other.tinygpt"
    write_state(other, random_weights(config, seed=4))
    with pytest.raises(Exception, match="trained on other base weights") as e:
        load_adapter(tmp_path / "a.tgla", load(other)[0])
    print(f"on another base: {e.value}")


def test_sampling_with_and_without_the_adapters(tmp_path):
    """Generation adds the adapters (KV cache and recompute alike) and python_ref samples the same
    bytes; disabled, the core samples exactly its base; merged, the same as with the adapters."""
    config = model_config("tiny")
    path = tmp_path / "wide.tinygpt"
    write_state(path, random_weights(config, seed=8, spread=0.3))
    lc = LoRAConfig(rank=4, alpha=8, targets=TARGETS, seed=2)
    lora = perturbed(LoRA(model_from_state(read_state(path)), lc), scale=0.3)
    prompt, n = b"ROMEO:\nBut soft", 60
    with NativeModel(config, 1, 2, lora=lc) as m:
        m.import_state(state_bytes_of_file(path))
        m.lora_import(adapter_state(lora))
        adapted = m.generate(prompt, n, 0.8, 40, 5)
        recomputed = m.generate(prompt, n, 0.8, 40, 5, use_cache=False)
        m.lora_set_enabled(False)
        without = m.generate(prompt, n, 0.8, 40, 5)
        m.lora_set_enabled(True)
        m.lora_merge()
        merged = m.generate(prompt, n, 0.0, 0, 0)
        m.lora_unmerge()
        greedy = m.generate(prompt, n, 0.0, 0, 0)
    with NativeModel(config, 1, 2) as plain:
        plain.import_state(state_bytes_of_file(path))
        base_tokens = plain.generate(prompt, n, 0.8, 40, 5)
    reference = generate(lora.model, prompt, n, 0.8, 40, 5)
    print(f"\nwith adapters: {adapted[:40]!r}\nwithout:       {without[:40]!r}")
    assert adapted == recomputed == reference
    assert without == base_tokens and without != adapted
    assert merged == greedy


def tg_config(config):
    return binding().struct("tg_config", config.to_json() | {"initStd": init_std()})


def arena_parts(preset: str, lc: LoRAConfig) -> dict:
    """The arena bytes of a full and a LoRA model of a preset (tg_arena_bytes_for: exactly what
    tg_create allocates, the one allocation of a model) and the parts of the budget."""
    config, batch = model_config(preset), train_config(preset).batch
    cfg = tg_config(config)
    full = lib().tg_arena_bytes_for(C.byref(cfg), batch)
    lora = lib().tg_lora_arena_bytes_for(C.byref(cfg), C.byref(lora_struct(lc)), batch)
    P = config.param_count()
    Q = sum(int(np.prod(s)) for _, s in adapter_manifest(config, lc))
    activations = full - 16 * P  # the full arena less its weights, gradients, m and v
    return dict(full=full, lora=lora, P=P, Q=Q, activations=activations,
                budget=4 * P + activations + 12 * Q)


@pytest.mark.parametrize("preset", ["tiny", "small", "medium", "large", "xl"])
@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), TARGETS])
def test_lora_arena_holds_no_base_gradients_or_moments(preset, targets):
    """The LoRA arena is at most base weights + activations + adapters and their moments."""
    lc = LoRAConfig(rank=8, alpha=16, targets=targets)
    a = arena_parts(preset, lc)
    mib = 1 << 20
    print(f"\n{preset}, r=8 on {','.join(lc.targets)}: full arena {a['full'] / mib:.1f} MiB (16P = "
          f"{16 * a['P'] / mib:.1f}); LoRA arena {a['lora'] / mib:.1f} MiB = {a['lora'] / a['full']:.2f}x; budget "
          f"4P {4 * a['P'] / mib:.1f} + activations {a['activations'] / mib:.1f} + 12Q {12 * a['Q'] / mib:.2f} "
          f"= {a['budget'] / mib:.1f} MiB")
    assert a["lora"] <= a["budget"]
    tiny = model_config("tiny")
    with NativeModel(tiny, 2, lora=lc) as m:  # what tg_create_lora allocates is what was announced
        assert m.arena_bytes == lib().tg_lora_arena_bytes_for(C.byref(tg_config(tiny)), C.byref(lora_struct(lc)), 2)


def test_a_resumed_python_ref_fine_tune_continues_the_cores_run(tmp_path):
    """The core's adapter state at step 20, written as an adapter file with its data state and
    corpus, resumes in python_ref (finetune.resume_finetune) to the losses the core goes on to."""
    from python_ref.finetune import resume_finetune
    base, corpus, run = small_finetune(tmp_path, ("q_proj", "v_proj"), 0)
    with native_finetune(base, corpus, run) as m:
        for _ in range(20):
            m.train_step()
        state = m.lora_export(True)
        core_next = [m.train_step() for _ in range(5)]
    lora, optimizer = run.lora, run.optimizer
    Q = sum(t.numel() for t in lora.parameters())
    flat, step = np.frombuffer(state[4:], "<f4").copy(), int(np.frombuffer(state[:4], "<i4")[0])
    offset = 0
    with torch.no_grad():
        for _, a in lora.named_adapters():
            k = a.numel()
            a.copy_(torch.from_numpy(flat[offset:offset + k].reshape(a.shape)))
            optimizer.state[a] = {"step": torch.tensor(float(step)),
                                  "exp_avg": torch.from_numpy(flat[Q + offset:Q + offset + k].reshape(a.shape)),
                                  "exp_avg_sq": torch.from_numpy(flat[2 * Q + offset:2 * Q + offset + k]
                                                                 .reshape(a.shape))}
            offset += k
    run.step = step
    run.batches.batches_drawn = step
    run.save(tmp_path / "at20.tgla")
    resumed = resume_finetune(tmp_path / "at20.tgla", base, corpus, "cpu", steps=25)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        resumed.run(25, progress=False)
    finally:
        torch.set_num_threads(threads)
    py_next = [loss for _, loss in resumed.loss_history[-5:]]
    rel = np.abs(np.array(py_next) - core_next) / np.array(core_next)
    print(f"\ncore at step 20 -> adapter file -> python_ref resumes: steps 21-25 max rel loss diff {rel.max():.1e}")
    assert rel.max() < 1e-5


@pytest.mark.parametrize("rank,alpha", [(0, 16), (4097, 16), (8, 0), (8, -1.5), (8, float("nan")),
                                        (8, float("inf"))])
def test_bad_lora_settings_get_python_refs_sentence(rank, alpha):
    """presets.json's "lora" rules refuse the same values in the same words in python_ref and the core."""
    from python_ref.config import ConfigError
    with pytest.raises(ConfigError) as e:
        LoRAConfig(rank=rank, alpha=alpha)
    lc = binding().struct("tg_lora_config", {"rank": rank, "alpha": alpha, "targets": 5})
    code = lib().tg_lora_arena_bytes_for(C.byref(tg_config(model_config("tiny"))), C.byref(lc), 2)
    print(f"\nrank {rank}, alpha {alpha}: {e.value}")
    assert code == -1 and lib().tg_last_error().decode() == str(e.value)
