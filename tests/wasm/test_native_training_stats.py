"""Training, seen, in the C++ core (tg_train_step_stats, tg_attention_entropy) against
python_ref/training_stats.py: the same weights and batches give the same per-layer gradient norms,
update-to-weight ratios and attention entropies, within 1e-4, for full training and for a LoRA
fine-tune's adapters; a measured step is the same step (bit for bit) as an unmeasured one, and the
sums do not depend on the thread count."""
import numpy as np
import pytest
import torch

from python_ref.config import DEFAULT_CORPUS, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref.finetune import new_finetune
from python_ref.lora import TARGETS
from python_ref.model import TinyGPT, manifest
from python_ref.tinygpt_file import CheckpointState, write_state
from python_ref.train import make_optimizer
from python_ref.training_stats import differences, max_entropy, measured_steps, probe_window, summarise
from support.tinygpt_native import NativeModel, state_bytes_of_file

STEPS, EVERY = 30, 10
BAR = 1e-4


def reference(module, optimizer, batches, clip, probe):
    """python_ref's steps 1..STEPS, measured every EVERY: {step: (loss, summary)}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measured_steps(module, optimizer, batches, clip, probe, STEPS, EVERY)
    finally:
        torch.set_num_threads(threads)


def native_steps(m, names, probe, ctx):
    """The C++ core's steps 1..STEPS, measured every EVERY: {step: (loss, summary)}."""
    out = {}
    for step in range(1, STEPS + 1):
        if step % EVERY:
            m.train_step()
            continue
        loss, sums = m.train_step_stats()
        out[step] = (loss, summarise(names, sums, m.attention_entropy(probe), ctx))
    return out


def compare(what, ref, got):
    """Prints and returns the largest difference of each quantity over the measured steps."""
    worst = {}
    for step in ref:
        assert abs(got[step][0] - ref[step][0]) / ref[step][0] < 1e-5, (step, got[step][0], ref[step][0])
        assert got[step][1]["groups"] == ref[step][1]["groups"]
        for key, (abs_diff, rel_diff) in differences(got[step][1], ref[step][1]).items():
            a, r = worst.get(key, (0.0, 0.0))
            worst[key] = (max(a, abs_diff), max(r, rel_diff))
    last = ref[STEPS][1]
    print(f"\n{what}, steps {', '.join(map(str, ref))}: groups {last['groups']}; at step {STEPS} gradient norms "
          f"{np.round(last['gradNorm'], 4).tolist()}, update ratios {[f'{r:.2e}' for r in last['updateRatio']]}, "
          f"entropy {np.round(last['entropy'], 3).tolist()} (uniform: {last['maxEntropy']:.3f})")
    print("C++ against python_ref, largest difference (absolute, relative): "
          + "; ".join(f"{k} {a:.1e}, {r:.1e}" for k, (a, r) in worst.items()))
    return worst


def test_full_training_stats_equal_python_ref():
    config, t = model_config("tiny"), train_config("tiny")
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    train, _ = corpus.split(t.valFraction, config.ctx)
    probe = probe_window(corpus.data, config.ctx)
    names = [n for n, _ in manifest(config)]
    model = TinyGPT(config, t.seed)
    ref = reference(model, make_optimizer(model, t), BatchStream(train, config.ctx, t.batch, t.seed), t.gradClip, probe)
    with NativeModel(config, t.batch, n_threads=2) as m:
        m.init(t.seed)
        m.set_hyper_from(t)
        m.set_corpus(corpus.data, t.valFraction)
        assert [n for n, _, _ in m.manifest()] == names
        got = native_steps(m, names, probe, config.ctx)
    worst = compare("tiny, full training", ref, got)
    assert ref[STEPS][1]["groups"] == ["embeddings", "block 0", "block 1", "final LayerNorm"]
    assert worst["gradNorm"][1] < BAR and worst["updateRatio"][1] < BAR and worst["gradNormTotal"][1] < BAR
    assert worst["entropy"][0] < BAR
    for _, summary in got.values():
        assert all(0 <= h <= summary["maxEntropy"] + 1e-9 for row in summary["entropy"] for h in row)
        assert all(1e-6 < r < 1e-1 for r in summary["updateRatio"])


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), TARGETS])
def test_lora_adapter_stats_equal_python_ref(tmp_path, targets):
    """A base far from its init (sharp attention), so that the entropies differ between heads."""
    config, preset = model_config("tiny"), "tiny"
    base = tmp_path / "base.tinygpt"
    rng = np.random.default_rng(3)
    weights = {name: ((1.0 if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight"
                       else 0.0) + 0.15 * rng.standard_normal(shape)).astype(np.float32)
               for name, shape in manifest(config)}
    write_state(base, CheckpointState(config, 0, weights, header={"preset": preset}))
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    run = new_finetune(base, corpus, "cpu", rank=4, alpha=8, targets=targets, evalEvery=0)
    t = run.train_cfg
    names = [n for n, _ in run.lora.named_adapters()]
    probe = probe_window(corpus.data, config.ctx)
    ref = reference(run.lora, run.optimizer, run.batches, t.gradClip, probe)
    with NativeModel(config, t.batch, n_threads=2, lora=run.lora.config) as m:
        m.import_state(state_bytes_of_file(base))
        m.lora_init()
        m.set_hyper_from(t)
        m.set_corpus(corpus.data, t.valFraction)
        m.set_data_state(t.seed, 0)
        assert [n for n, _, _ in m.lora_manifest()] == names
        got = native_steps(m, names, probe, config.ctx)
    worst = compare(f"tiny, LoRA r=4 on {','.join(run.lora.config.targets)}", ref, got)
    assert ref[STEPS][1]["groups"] == ["block 0", "block 1"]
    assert worst["gradNorm"][1] < BAR and worst["updateRatio"][1] < BAR and worst["gradNormTotal"][1] < BAR
    assert worst["entropy"][0] < BAR


def test_a_measured_step_is_the_same_step_on_any_thread_count():
    """Measuring every step leaves the weights, moments and losses bit-identical to unmeasured training, and
    the sums are the same on 1 and 3 threads."""
    config, t = model_config("tiny"), train_config("tiny")
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    probe = probe_window(corpus.data, config.ctx)
    runs = []
    for threads, measured in ((1, False), (1, True), (3, True)):
        with NativeModel(config, t.batch, n_threads=threads) as m:
            m.init(t.seed)
            m.set_hyper_from(t)
            m.set_corpus(corpus.data, t.valFraction)
            losses, sums, entropy = [], [], []
            for _ in range(6):
                if measured:
                    loss, s = m.train_step_stats()
                    sums.append(s)
                    entropy.append(m.attention_entropy(probe))
                else:
                    loss = m.train_step()
                losses.append(loss)
            runs.append((losses, m.export_state(True), sums, entropy))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert all(np.array_equal(a, b) for a, b in zip(runs[1][2], runs[2][2]))
    assert all(np.array_equal(a, b) for a, b in zip(runs[1][3], runs[2][3]))
    print(f"\n6 steps measured and not: the same {len(runs[0][1])} state bytes and losses; sums equal on 1 and 3 "
          f"threads; entropy at step 6 {np.round(runs[1][3][-1], 4).tolist()} (uniform {max_entropy(config.ctx):.4f})")


def test_attention_entropy_of_uniform_and_one_hot_attention():
    """Zero q and k weights give uniform attention: each head's entropy is mean_i ln(i + 1) exactly."""
    config = model_config("tiny")
    with NativeModel(config, 1) as m:
        m.init(1)
        state = bytearray(m.export_state(False))
        flat = np.frombuffer(state, dtype="<f4", offset=4)
        offset = 0
        for name, shape in manifest(config):
            n = int(np.prod(shape))
            if ".q_proj." in name or ".k_proj." in name:
                flat[offset:offset + n] = 0
            offset += n
        m.import_state(bytes(state))
        got = m.attention_entropy(b"To be, or not to be: that is it")
    assert np.allclose(got, max_entropy(31), rtol=0, atol=1e-12), (got, max_entropy(31))
    with pytest.raises(Exception, match="outside 1..ctx"):
        m2 = NativeModel(config, 1)
        m2.attention_entropy(b"")
