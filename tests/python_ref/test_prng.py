"""python_ref/prng.py against the test vectors of docs/determinism.md (read from the doc itself)."""
import json
import re

import numpy as np
import pytest

from python_ref.config import DEFAULT_CORPUS, REPO_ROOT, model_config, train_config
from python_ref.data import BatchStream, Corpus
from python_ref import prng
from python_ref.model import initial_tensor_values
from python_ref.prng import (
    COS_COEFFS, LOG_COEFFS, SIN_COEFFS, SampleStream, batch_offsets, normals, portable_cos_2pi,
    portable_log, splitmix64,
)

DOC = (REPO_ROOT / "docs" / "determinism.md").read_text()


def doc_vectors() -> dict:
    blocks = re.findall(r"```json test-vectors\n(.*?)```", DOC, re.S)
    assert len(blocks) == 1, "docs/determinism.md must hold exactly one ```json test-vectors block"
    return json.loads(blocks[0])


VECTORS = doc_vectors()
SEEDS = ["0", "42"]


def test_doc_covers_seeds_0_and_42():
    for section in ("splitmix64", "normals", "tinyInit", "firstBatchStarts"):
        assert set(SEEDS) <= set(VECTORS[section]), section


@pytest.mark.parametrize("seed", SEEDS)
def test_splitmix64_vectors(seed):
    want = VECTORS["splitmix64"][seed]
    got = [f"{int(x):016x}" for x in splitmix64(int(seed), 0, len(want))]
    assert got == want


def test_splitmix64_any_slice_equals_sequential_stream():
    mask = (1 << 64) - 1
    state, sequential = 12345, []
    for _ in range(40):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        sequential.append(z ^ (z >> 31))
    assert [int(x) for x in splitmix64(12345, 0, 40)] == sequential
    assert [int(x) for x in splitmix64(12345, 17, 9)] == sequential[17:26]


@pytest.mark.parametrize("seed", SEEDS)
def test_normals_vectors_bit_exact(seed):
    want = VECTORS["normals"][seed]
    got = normals(int(seed), 0, len(want))
    print(f"seed {seed}: max |normal - doc vector| = {np.max(np.abs(got - np.array(want)))}")
    assert [float(x).hex() for x in got] == [float(w).hex() for w in want]
    # normal j is a pure function of (seed, j)
    assert normals(int(seed), 2, 2).tolist() == got[2:].tolist()


@pytest.mark.parametrize("threads", [1, 3])
def test_normal_float32_in_chunks_is_the_one_shot_draw(monkeypatch, threads):
    # chunks drawn in turn (1) or on threads (3); an odd first index and a ragged last chunk
    monkeypatch.setattr(prng, "NORMAL_CHUNK", 1000)
    monkeypatch.setattr(prng, "_init_threads", lambda: threads)
    got = prng.normal_float32(4242, 7, 5321, 0.02)
    want = (normals(4242, 7, 5321) * 0.02).astype(np.float32)
    print(f"{threads} thread(s), chunked vs one piece: max |difference| = {np.max(np.abs(got - want))}")
    assert got.dtype == np.float32 and got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.mark.parametrize("seed", SEEDS)
def test_tiny_init_float32_bit_patterns(seed):
    want = VECTORS["tinyInit"][seed]
    values = dict(initial_tensor_values(model_config("tiny"), int(seed)))
    for name, hexes in want.items():
        bits = values[name].reshape(-1)[: len(hexes)].view(np.uint32)
        want = np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)
        print(f"seed {seed} {name}: max |init - doc vector| = {np.max(np.abs(bits.view(np.float32) - want))}")
        assert [f"{int(b):08x}" for b in bits] == hexes, name


@pytest.mark.parametrize("seed", SEEDS)
def test_first_batch_starts_on_the_shipped_corpus(seed):
    v = VECTORS["firstBatchStarts"]
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(train_config("tiny").valFraction, v["ctx"])
    assert train.size == v["nTrain"]
    n_starts = v["nTrain"] - v["ctx"]
    for b in (0, 1):
        want = v[seed][f"batch{b}"]
        got = batch_offsets(int(seed), b, v["batch"], n_starts)
        assert got[: len(want)].tolist() == want
    # and BatchStream cuts its windows exactly there
    stream = BatchStream(train, v["ctx"], v["batch"], int(seed))
    x, _ = stream.next()
    start = v[seed]["batch0"][0]
    assert x[0].tolist() == train[start:start + v["ctx"]].tolist()


def test_same_seed_same_init_and_batches_different_seed_differs():
    c = model_config("tiny")
    train, _ = Corpus.from_file(DEFAULT_CORPUS).split(0.1, c.ctx)

    def run(seed):
        weights = [a.copy() for _, a in initial_tensor_values(c, seed)]
        stream = BatchStream(train, c.ctx, 4, seed)
        batches = [stream.next() for _ in range(5)]
        return weights, batches

    w1, b1 = run(7)
    w2, b2 = run(7)
    w3, b3 = run(8)
    print(f"same seed twice: max |init difference| = {max(np.max(np.abs(a - b)) for a, b in zip(w1, w2))}")
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(w1, w2))
    assert all(np.array_equal(x1, x2) and np.array_equal(y1, y2) for (x1, y1), (x2, y2) in zip(b1, b2))
    assert not np.array_equal(w1[0], w3[0])
    assert not all(np.array_equal(x1, x3) for (x1, _), (x3, _) in zip(b1, b3))


def test_streams_are_independent_of_each_other():
    """init, data and sample streams of one seed do not share outputs."""
    from python_ref.prng import data_stream_state, sample_stream_state
    outs = [set(splitmix64(s, 0, 1000).tolist()) for s in (5, data_stream_state(5), sample_stream_state(5))]
    assert not (outs[0] & outs[1]) and not (outs[0] & outs[2]) and not (outs[1] & outs[2])


def test_coefficients_match_the_decimal_strings_in_the_doc():
    for label, coeffs in (("L", LOG_COEFFS), ("CC", COS_COEFFS), ("SC", SIN_COEFFS)):
        m = re.search(rf"^{label} += (.*?)(?=^\w+ += |^```)", DOC, re.S | re.M)
        doc = [float(t) for t in m.group(1).replace("\n", " ").split(",")]
        assert doc == list(coeffs), label


def test_portable_log_and_cos_against_numpy():
    rng = np.random.default_rng(0)
    u = np.concatenate([
        rng.random(200_000), (np.arange(1, 20_001) * 2.0**-53),  # tiny arguments, as uniform_open0 gives
        np.array([2.0**-53, 0.5, 0.7071067811865476, 1.0 - 2.0**-53, 1.0]),
    ])
    log_err = np.max(np.abs(portable_log(u) - np.log(u)))
    v = np.concatenate([rng.random(200_000), np.arange(0, 4096) / 4096.0, [1.0 - 2.0**-53]])
    cos_err = np.max(np.abs(portable_cos_2pi(v) - np.cos(2 * np.pi * v)))
    print(f"max |portable_log - np.log| = {log_err:.3e}; max |portable_cos_2pi - np.cos(2 pi u)| = {cos_err:.3e}")
    assert log_err <= 1e-14 and cos_err <= 1e-14


def test_sample_stream_is_resumable():
    a = SampleStream(3)
    first = [a.next_uniform() for _ in range(5)]
    b = SampleStream(3, drawn=2)
    assert [b.next_uniform() for _ in range(3)] == first[2:]
    assert all(0.0 <= u < 1.0 for u in first)
