"""python_ref/data.py: corpus refusal, the contiguous split, batch windows and eval windows."""
import math

import numpy as np
import pytest

from python_ref.config import DEFAULT_CORPUS
from python_ref.data import BatchStream, Corpus, CorpusError, eval_window_starts, windows_at
from python_ref.prng import batch_offsets


def test_empty_corpus_refused(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(CorpusError, match="'empty.txt' is empty"):
        Corpus.from_file(tmp_path / "empty.txt")


def test_missing_or_directory_corpus_refused(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        Corpus.from_file(tmp_path / "nope.txt")
    with pytest.raises(CorpusError, match="is a directory"):
        Corpus.from_file(tmp_path)


def test_too_short_corpus_for_ctx_refused_with_numbers():
    corpus = Corpus.from_bytes(b"x" * 300, "short.txt")
    with pytest.raises(CorpusError,
                       match=r"300 bytes: too short for a context of 64 .*val split 30 bytes; each needs at least 65"):
        corpus.split(0.1, 64)
    # the smallest corpus that works: ceil(65 / 0.1) = 650 bytes
    train, val = Corpus.from_bytes(b"x" * 650, "ok.txt").split(0.1, 64)
    assert (train.size, val.size) == (585, 65)


def test_split_sizes_are_contiguous_and_follow_the_formula():
    corpus = Corpus.from_file(DEFAULT_CORPUS)
    n = corpus.data.size
    train, val = corpus.split(0.1, 64)
    assert val.size == math.floor(n * 0.1) and train.size == n - val.size
    assert np.array_equal(np.concatenate([train, val]), corpus.data)
    ident = corpus.identity()
    assert ident["bytes"] == n and ident["name"] == "tinyshakespeare.txt" and len(ident["sha256"]) == 64


def test_batches_are_windows_with_y_shifted_by_one():
    train = np.frombuffer(bytes(range(256)) * 8, dtype=np.uint8)
    ctx, batch, seed = 16, 5, 9
    stream = BatchStream(train, ctx, batch, seed)
    for b in range(4):
        x, y = stream.next()
        starts = batch_offsets(seed, b, batch, train.size - ctx)
        assert x.shape == y.shape == (batch, ctx) and x.dtype == np.int64
        for r, s in enumerate(starts):
            assert 0 <= s <= train.size - ctx - 1
            assert x[r].tolist() == train[s:s + ctx].tolist()
            assert y[r].tolist() == train[s + 1:s + ctx + 1].tolist()
    assert stream.state() == {"seed": seed, "batchesDrawn": 4}


def test_batch_stream_resumes_from_batches_drawn():
    train = np.frombuffer(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes(), np.uint8)
    a = BatchStream(train, 32, 4, 1)
    batches = [a.next() for _ in range(6)]
    b = BatchStream(train, 32, 4, 1, batches_drawn=3)
    for x, y in batches[3:]:
        bx, by = b.next()
        assert np.array_equal(bx, x) and np.array_equal(by, y)


def test_every_start_can_be_drawn_including_the_last():
    """n_starts = nTrain - ctx: start nTrain - ctx - 1 is the last whose y fits."""
    ctx = 4
    train = np.arange(ctx + 3, dtype=np.uint8)  # 3 possible starts
    seen = set()
    stream = BatchStream(train, ctx, 64, 0)
    x, y = stream.next()
    seen.update(x[:, 0].tolist())
    assert seen == {0, 1, 2}
    assert y.max() == train[-1]


def test_batch_stream_refuses_a_split_shorter_than_a_window():
    with pytest.raises(CorpusError, match="too short for one window"):
        BatchStream(np.zeros(8, np.uint8), 8, 2, 0)


@pytest.mark.parametrize("n_val, ctx, windows",
                         [(65, 64, 64), (100, 64, 64), (100_000, 64, 64), (200, 64, 1), (70, 64, 3)])
def test_eval_window_starts_in_range_and_spread(n_val, ctx, windows):
    starts = eval_window_starts(n_val, ctx, windows)
    k = min(windows, n_val - ctx)
    assert starts.size == k
    assert starts[0] == 0 and (starts >= 0).all() and (starts + ctx + 1 <= n_val).all()
    if k > 1:
        assert starts[-1] == n_val - ctx - 1 and (np.diff(starts) >= 0).all()
    val = np.arange(n_val) % 256
    x, y = windows_at(val, starts, ctx)
    assert np.array_equal(x[:, 1:], y[:, :-1])


def test_eval_window_starts_refuses_a_too_short_val_split():
    with pytest.raises(CorpusError, match="validation split has 64 bytes"):
        eval_window_starts(64, 64, 8)
