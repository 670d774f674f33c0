"""The structural fuzz of issue 59: every value of a full header (what python_ref writes, plus the page's
keys) replaced by every kind of JSON value, or deleted, with both CRCs recomputed, so only the header's
meaning can be wrong. For each file: python_ref's reader and the page's reader (site/static/js/
tinygpt_file.js under Node) make the same decision in the same words, and `tinygpt train --resume`,
`sample`, `eval` and `export` either work or refuse in one line with exit code 2: no traceback."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
from collections import Counter

import pytest

from conftest import ROOT
from python_ref import cli
from python_ref.config import DEFAULT_CORPUS, train_config
from python_ref.data import Corpus
from python_ref.tinygpt_file import TinyGPTFileError, read_state
from support.tinygpt_files import assemble, split_file, valid_file

DRIVER = ROOT / "tests" / "site" / "hosts" / "tinygpt_file_driver.mjs"
DEEP = json.loads("[" * 33 + "]" * 33)  # one level past the limit
VALUES = {"null": None, "true": True, "0": 0, "-1": -1, "2.5": 2.5, "1e300": 1e300, "2^60": 2**60,
          "'x'": "x", "''": "", "[]": [], "[1, 2]": [1, 2], "{}": {}, "{'a': 1}": {"a": 1}, "deep": DEEP}


# The run's corpus: the default one's first 20,000 bytes. Its val split is what `eval` reads for every
# accepted file (110 of them); the whole default corpus took 1.1 s an eval, two thirds of this module's time.
SMALL_CORPUS_BYTES = 20_000


def full_header(corpus_path) -> tuple[dict, bytes]:
    """valid_file()'s MICRO model under a header with every key the levels read, as a resumable run of
    the corpus at corpus_path would have it."""
    header, state = split_file(valid_file())
    corpus = Corpus.from_file(corpus_path).identity()
    training = {**train_config("tiny").to_json(), "seed": 1, "worldSize": 1, "rankBatch": 16, "lrSchedule": "cosine",
                "warmupSteps": 2, "precision": "fp32"}
    header.update(preset=None, training=training, dataState={"seed": 1, "batchesDrawn": 3}, corpus=corpus,
                  corpora=[dict(corpus, fromStep=0, toStep=3)], lossHistory=[[1, 5.5], [3, 5.25]],
                  valHistory=[[3, 5.3]], finalLoss=5.25, bestVal=5.3, sample="hi",
                  savedAt="2026-12-05T12:00:00+00:00", name="micro, seed 1",
                  run={"id": "r1", "backend": "wasm", "engine": "simd"})
    return header, state


def paths(value, prefix=()):
    """Every key and list element of a header, two levels down (and the first element of its lists)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and value:
        items = [(0, value[0])]
    else:
        return
    for key, child in items:
        if key == "headerCrc32":
            continue  # assemble() writes it
        yield prefix + (key,)
        if len(prefix) < 2:
            yield from paths(child, prefix + (key,))


def mutated(header: dict, path: tuple, value, delete: bool = False) -> dict:
    h = copy.deepcopy(header)
    parent = h
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(value)
    return h


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    corpus = folder / "corpus.txt"
    corpus.write_bytes(DEFAULT_CORPUS.read_bytes()[:SMALL_CORPUS_BYTES])
    header, state = full_header(corpus)
    made = {"valid": assemble(header, state)}
    for path in paths(header):
        name = ".".join(map(str, path))
        made[f"{name} deleted"] = assemble(mutated(header, path, None, delete=True), state)
        for label, value in VALUES.items():
            made[f"{name} = {label}"] = assemble(mutated(header, path, value), state)
    made["preset says tiny"] = assemble(mutated(header, ("preset",), "tiny"), state)
    files = {}
    for i, (name, raw) in enumerate(made.items()):
        files[name] = folder / f"{i}.tinygpt"
        files[name].write_bytes(raw)
    return files, corpus


def python_verdict(path) -> str | None:
    try:
        read_state(path)
    except TinyGPTFileError as e:
        return str(e)
    return None


def js_verdicts(files: dict, out) -> dict:
    jobs = [{"id": name, "op": "readHeader", "in": str(path)} for name, path in files.items()]
    jobs += [{"id": "read " + name, "op": "read", "in": str(path), "out": str(out)} for name, path in files.items()]
    proc = subprocess.run(["node", str(DRIVER)], input=json.dumps(jobs), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_both_readers_decide_alike_in_the_same_words(cases, tmp_path):
    cases, _ = cases
    js = js_verdicts(cases, tmp_path / "state.bin")
    agree, refused, differ = 0, Counter(), []
    for name, path in cases.items():
        py = python_verdict(path)
        got = js["read " + name].get("error")
        listed = js[name].get("error")
        if py != got or listed != got:
            differ.append(f"{name}:\n  python:     {py}\n  JS read:    {got}\n  JS header:  {listed}")
            continue
        agree += 1
        if py:
            refused[py.split(":")[0]] += 1
    print(f"\n{len(cases)} files: {agree} decided alike ({sum(refused.values())} refused, "
          f"{agree - sum(refused.values())} accepted), {len(differ)} differ")
    for reason, n in refused.most_common():
        print(f"  {n:4d} refused: {reason}")
    assert python_verdict(cases["valid"]) is None
    assert not differ, "\n".join(differ[:20])


def run_cli(argv: list[str]) -> tuple[int, str]:
    """tinygpt in this process: (exit code, stderr); an exception escaping main() fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


def test_every_command_works_or_refuses_in_one_line(cases, tmp_path):
    cases, corpus = cases
    counts = Counter()
    for name, path in cases.items():
        refused = python_verdict(path)
        step = None if refused else read_state(path).step
        commands = {
            "train --resume": ["train", "--resume", str(path), "--out", str(tmp_path / "out.tinygpt"), "--quiet",
                               "--force", "--steps", str((step or 0) + 1), "--corpus", str(corpus)],
            "sample": ["sample", str(path), "--max-new-tokens", "4", "--device", "cpu"],
            "eval": ["eval", str(path), "--device", "cpu", "--corpus", str(corpus)],
            "export": ["export", str(path), str(tmp_path / "export.tinygpt"), "--force"],
        }
        for command, argv in commands.items():
            code, err = run_cli(argv)
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("preset ")]
            outcome = "ok" if code == 0 else "refused"
            counts[(command, outcome)] += 1
            if refused:
                assert code == 2 and len(lines) == 1 and refused in lines[0], (name, command, code, err)
            else:
                assert code in (0, 2) and (code == 0 or len(lines) == 1), (name, command, code, err)
    print("\n" + "\n".join(f"  {command:15s} {outcome:8s} {n}" for (command, outcome), n in sorted(counts.items())))
