"""`tinygpt finetune` (python_ref/finetune.py): LoRA on a frozen base, the resumable adapter file,
exact resume, the merged model, `sample`/`eval`/`export --adapter`, and every refusal before any work."""
import json

import numpy as np
import pytest
import torch

from python_ref.cli import main
from python_ref.config import DEFAULT_CORPUS, presets_file
from python_ref.data import Corpus
from python_ref.finetune import lora_train_config, new_finetune
from python_ref.lora import LoRAConfig, load_adapter, lora_defaults, read_adapter
from python_ref.tinygpt_file import load, read_state


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny base trained 200 steps on Shakespeare, and a text of another style (all lowercase, one
    repeated phrase) to fine-tune it on."""
    d = tmp_path_factory.mktemp("finetune")
    corpus = d / "shakespeare.txt"
    corpus.write_bytes(DEFAULT_CORPUS.read_bytes()[:20_000])
    style = d / "lowercase.txt"
    text = DEFAULT_CORPUS.read_bytes()[20_000:32_000].decode().lower().replace("\n\n", "\nand so it goes.\n")
    style.write_text(text)
    base = d / "base.tinygpt"
    assert main(["train", "--preset", "tiny", "--steps", "200", "--lr", "3e-3", "--corpus", str(corpus),
                 "--out", str(base), "--device", "cpu", "--quiet"]) == 0
    return d, base, style


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_defaults_come_from_presets():
    d = lora_defaults()
    assert d == presets_file()["lora"]
    t = lora_train_config(4)
    assert (t.lr, t.weightDecay, t.steps) == (d["lr"], d["weightDecay"], d["steps"])
    training = presets_file()["training"]
    assert (t.beta1, t.beta2, t.gradClip) == (training["beta1"], training["beta2"], training["gradClip"])


def test_finetune_lowers_the_loss_on_its_text_and_saves_what_resumes(files, capsys, tmp_path):
    d, base, style = files
    out, merged = tmp_path / "a.tgla", tmp_path / "merged.tinygpt"
    code, stdout, err = run_cli(capsys, "finetune", base, "--corpus", style, "--steps", 40, "--lr", 3e-3,
                                "--targets", "all", "--eval-every", 20, "--out", out, "--merged-out", merged,
                                "--device", "cpu", "--quiet")
    assert code == 0, err
    print(err.strip(), "\n", stdout.strip())
    f = read_adapter(out)
    h = f.header
    assert f.step == 40 and f.m is not None
    assert h["dataState"] == {"seed": h["training"]["seed"], "batchesDrawn": 40}
    assert h["corpus"]["name"] == "lowercase.txt" and h["corpora"] == [{**h["corpus"], "fromStep": 0, "toStep": 40}]
    assert h["base"]["name"] == "base.tinygpt" and h["base"]["preset"] == "tiny" and h["base"]["step"] == 200
    assert h["baseCorpus"]["name"] == "shakespeare.txt"
    assert h["training"]["weightDecay"] == 0 and len(h["lossHistory"]) == 40
    val = [v for _, v in h["valHistory"]]
    model, _ = load(base)
    start = new_finetune(base, Corpus.from_file(style), "cpu").val_loss()
    with capsys.disabled():
        print(f"\nval loss on the fine-tune's text: base {start:.4f} -> {val[-1]:.4f} after 40 LoRA steps")
    assert val[-1] < start - 0.05

    # the merged model: a plain .tinygpt with the adapted model's logits
    adapted = load_adapter(out, model)
    plain, meta = load(merged)
    assert meta["lora"]["rank"] == f.config.rank and meta["base"]["name"] == "base.tinygpt"
    idx = torch.from_numpy(np.frombuffer(style.read_bytes()[:32], np.uint8).astype(np.int64)[None])
    with torch.no_grad():
        diff = (plain(idx)[0] - adapted(idx)[0]).abs().max().item()
    with capsys.disabled():
        print(f"merged .tinygpt vs base + adapter: max |logit diff| {diff:.1e}")
    assert diff < 1e-5
    # export --adapter writes the same merged weights
    code, _, _ = run_cli(capsys, "export", base, tmp_path / "exported.tinygpt", "--adapter", out)
    exported = read_state(tmp_path / "exported.tinygpt").weights
    assert code == 0 and all(np.array_equal(exported[n], w) for n, w in read_state(merged).weights.items())

    # sample and eval with the adapter
    code, text, _ = run_cli(capsys, "sample", base, "--adapter", out, "--prompt", "and so", "--max-new-tokens", 40,
                            "--device", "cpu")
    assert code == 0 and text.startswith("and so")
    code, text, _ = run_cli(capsys, "eval", base, "--adapter", out, "--file", style, "--device", "cpu")
    assert code == 0 and json.loads(text)["loss"] < start


def test_resume_is_exact(files, capsys, tmp_path):
    d, base, style = files
    common = ["--corpus", style, "--lr", 3e-3, "--rank", 4, "--alpha", 8, "--targets", "q_proj,v_proj,fc_out",
              "--eval-every", 0, "--device", "cpu", "--quiet"]
    assert run_cli(capsys, "finetune", base, "--steps", 12, "--out", tmp_path / "straight.tgla", *common)[0] == 0
    assert run_cli(capsys, "finetune", base, "--steps", 5, "--out", tmp_path / "half.tgla", *common)[0] == 0
    code, _, err = run_cli(capsys, "finetune", base, "--resume", tmp_path / "half.tgla", "--steps", 12,
                           "--out", tmp_path / "resumed.tgla", *common)
    assert code == 0, err
    a, b = read_adapter(tmp_path / "straight.tgla"), read_adapter(tmp_path / "resumed.tgla")
    same = all(np.array_equal(x, y) for block in ("tensors", "m", "v")
               for x, y in zip(getattr(a, block), getattr(b, block)))
    print(f"5 + 7 resumed vs 12 uninterrupted: adapters and moments identical {same}; losses identical "
          f"{a.header['lossHistory'] == b.header['lossHistory']}")
    assert same and a.header["lossHistory"] == b.header["lossHistory"] and b.step == 12
    assert b.header["corpora"] == a.header["corpora"]


def test_bad_input_is_refused_before_any_work(files, capsys, tmp_path):
    d, base, style = files
    assert run_cli(capsys, "finetune", base, "--corpus", style, "--steps", 3, "--out", tmp_path / "a.tgla",
                   "--device", "cpu", "--quiet")[0] == 0
    other = tmp_path / "other.tinygpt"
    assert main(["train", "--preset", "tiny", "--steps", "1", "--corpus", str(style), "--out", str(other),
                 "--device", "cpu", "--quiet"]) == 0
    capsys.readouterr()
    short = tmp_path / "short.txt"
    short.write_text("too short")
    cases = [
        (["--targets", "q_proj,c_attn"], "LoRA targets must be distinct names"),
        (["--rank", 0], "LoRA rank must be an integer in [1, 4096], got 0"),
        (["--alpha", -1], "LoRA alpha must be a finite number > 0"),
        (["--lr", 0], "lr must be a finite number"),
        (["--corpus", short], "too short for a context"),
        (["--out", tmp_path / "missing" / "a.tgla"], "does not exist"),
        (["--merged-out", tmp_path / "missing" / "m.tinygpt"], "does not exist"),
        (["--resume", tmp_path / "a.tgla", "--corpus", DEFAULT_CORPUS], "is not the one this fine-tune"),
        (["--resume", tmp_path / "a.tgla", "--rank", 3], "--rank 3 differs from the adapter file's 8"),
        (["--resume", tmp_path / "a.tgla", "--batch", 3], "--batch 3 differs"),
        (["--resume", tmp_path / "a.tgla", "--steps", 2], "is not past the adapter file's step 3"),
    ]
    for extra, message in cases:
        argv = ["finetune", base, "--corpus", style, "--steps", 5, "--device", "cpu", "--quiet",
                "--out", tmp_path / "new.tgla"] + extra
        code, _, err = run_cli(capsys, *argv)
        with capsys.disabled():
            print(f"\n{' '.join(map(str, extra))[:60]:60} -> {err.strip()}", end="")
        assert code == 2 and message in err, err
        assert not (tmp_path / "new.tgla").exists()
    # an adapter on another base: refused with the reason, at resume and at sampling
    code, _, err = run_cli(capsys, "finetune", other, "--corpus", style, "--resume", tmp_path / "a.tgla",
                           "--steps", 5, "--device", "cpu", "--quiet")
    print(err.strip())
    assert code == 2 and "trained on other base weights" in err
    code, _, err = run_cli(capsys, "sample", other, "--adapter", tmp_path / "a.tgla", "--device", "cpu")
    assert code == 2 and "trained on other base weights" in err
    code, _, err = run_cli(capsys, "sample", base, "--adapter", base, "--device", "cpu")
    assert code == 2 and "that is a model checkpoint" in err


def test_lora_seed_keys_the_adapter_init(files):
    _, base, style = files
    run = new_finetune(base, Corpus.from_file(style), "cpu", seed=7)
    assert run.lora.config == LoRAConfig(**{**{k: lora_defaults()[k] for k in ("rank", "alpha", "targets")}, "seed": 7})
