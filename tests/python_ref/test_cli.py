"""The tinygpt CLI end to end: train, resume, sample, eval; bad input exits 2 with one line, no traceback."""
import json
import math
import os
import subprocess
import sys

import pytest

from python_ref.cli import main
from python_ref.config import DEFAULT_CORPUS

from conftest import ROOT


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    corpus = d / "corpus.txt"
    corpus.write_bytes(DEFAULT_CORPUS.read_bytes()[:20_000])
    ckpt = d / "model.tinygpt"
    assert main(["train", "--preset", "tiny", "--steps", "4", "--eval-every", "2", "--corpus", str(corpus),
                 "--out", str(ckpt), "--device", "cpu", "--quiet"]) == 0
    return d, corpus, ckpt


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_train_sample_eval(files, capsys):
    d, corpus, ckpt = files
    code, out, err = run_cli(capsys, "sample", ckpt, "--prompt", "ROMEO:", "--max-new-tokens", 30, "--device", "cpu")
    assert code == 0 and out.startswith("ROMEO:") and out.endswith("\n")
    code2, out2, _ = run_cli(capsys, "sample", ckpt, "--prompt", "ROMEO:", "--max-new-tokens", 30, "--device", "cpu",
                             "--no-cache")
    assert code2 == 0 and out2 == out
    sampled = out

    code, out, _ = run_cli(capsys, "eval", ckpt, "--file", corpus, "--device", "cpu")
    (whole,) = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and whole["what"] == "file" and whole["positions"] == 19_999
    code, out, _ = run_cli(capsys, "eval", ckpt, "--corpus", corpus, "--device", "cpu")
    split, windows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and split["what"] == "val split" and windows["what"] == "val windows"
    for r in (whole, split, windows):
        print(f"eval {r['what']}: loss {r['loss']:.4f}, bpb {r['bpb']:.4f}, "
              f"|loss/ln2 - bpb| = {abs(r['loss'] / math.log(2) - r['bpb']):.1e}")
        assert r["bpb"] == pytest.approx(r["loss"] / math.log(2), abs=1e-12)
        assert 3.0 < r["loss"] < 5.6

    resumed = d / "resumed.tinygpt"
    code, out, _ = run_cli(capsys, "train", "--resume", ckpt, "--steps", 6, "--corpus", corpus, "--out", resumed,
                           "--device", "cpu", "--quiet")
    assert code == 0 and "step 6" in out and resumed.exists()
    print("sampled:", repr(sampled))


def _corrupt(d, ckpt):
    raw = bytearray(ckpt.read_bytes())
    raw[-100] ^= 0x40  # a weight bit: the state CRC must catch it
    path = d / "corrupt.tinygpt"
    path.write_bytes(bytes(raw))
    return path


def _truncated(d, ckpt):
    path = d / "truncated.tinygpt"
    path.write_bytes(ckpt.read_bytes()[:-1000])
    return path


def _file(d, name, content):
    path = d / name
    path.write_bytes(content)
    return path


BAD_INPUTS = {
    "empty corpus": (lambda d, c: ["train", "--corpus", _file(d, "empty.txt", b""), "--steps", 1], "empty"),
    "short corpus": (lambda d, c: ["train", "--preset", "tiny", "--corpus", _file(d, "short.txt", b"x" * 50),
                                   "--steps", 1], "too short"),
    "missing corpus": (lambda d, c: ["train", "--corpus", d / "nope.txt", "--steps", 1], "does not exist"),
    "unknown preset": (lambda d, c: ["train", "--preset", "gigantic", "--steps", 1], "unknown preset"),
    "bad lr": (lambda d, c: ["train", "--preset", "tiny", "--lr", -1, "--steps", 1], "lr"),
    "out dir missing": (lambda d, c: ["train", "--preset", "tiny", "--steps", 1, "--out", d / "no" / "m.tinygpt"],
                        "folder"),
    "missing checkpoint": (lambda d, c: ["sample", d / "missing.tinygpt"], "does not exist"),
    "corrupt checkpoint": (lambda d, c: ["eval", _corrupt(d, c)], "CRC32 mismatch"),
    "truncated checkpoint": (lambda d, c: ["sample", _truncated(d, c)], "truncated"),
    "not a checkpoint": (lambda d, c: ["eval", _file(d, "text.tinygpt", b"hello world, no magic")], "magic"),
    "resume on another corpus": (lambda d, c: ["train", "--resume", c, "--steps", 9], "not the one"),
    "negative max tokens": (lambda d, c: ["sample", c, "--max-new-tokens", -1], "maxNewTokens must be an integer >= 0"),
    "eval tiny file": (lambda d, c: ["eval", c, "--file", _file(d, "one.txt", b"a")], "at least 2"),
    "bench bad steps": (lambda d, c: ["bench", "--preset", "tiny", "--steps", 0], "steps > 0"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(files, capsys, case):
    d, _, ckpt = files
    argv, fragment = BAD_INPUTS[case]
    code, out, err = run_cli(capsys, *argv(d, ckpt), "--device", "cpu")
    print(f"{case}: exit {code}: {err.strip()}")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert fragment in err


def test_bad_input_in_a_real_process(files):
    """The console entry as a user runs it: exit status 2, one line on stderr, nothing on stdout."""
    d, _, ckpt = files
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "python_ref.cli", "eval", str(_corrupt(d, ckpt))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(f"exit {proc.returncode}: {proc.stderr.strip()}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "CRC32 mismatch" in proc.stderr


def test_eval_every_0_evaluates_only_at_the_end(files, capsys, tmp_path):
    """Its help says "0: only at the end"; it used to be refused as not positive."""
    _, corpus, _ = files
    out = tmp_path / "end-only.tinygpt"
    code, _, err = run_cli(capsys, "train", "--preset", "tiny", "--steps", 3, "--eval-every", 0, "--corpus", corpus,
                           "--out", out, "--device", "cpu", "--quiet")
    from python_ref.tinygpt_file import read_state
    history = read_state(out).header["valHistory"]
    print(f"--eval-every 0: valHistory {history}")
    assert code == 0 and [s for s, _ in history] == [3]


def test_resume_with_steps_not_past_the_checkpoint_is_refused(files, capsys, tmp_path):
    """--steps is the total to reach: a step-4 checkpoint with --steps 3 used to train nothing and save a copy."""
    _, corpus, ckpt = files
    out = tmp_path / "copy.tinygpt"
    code, _, err = run_cli(capsys, "train", "--resume", ckpt, "--steps", 3, "--corpus", corpus, "--out", out,
                           "--device", "cpu", "--quiet")
    print(err.strip())
    assert code == 2 and "--steps 3 is not past the checkpoint's step 4" in err and not out.exists()
