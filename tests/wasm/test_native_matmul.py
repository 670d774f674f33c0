"""wasm/src/matmul.cpp, thread_pool.cpp and simd.h's exp/tanh against numpy float64, through the ctypes library of
bench/cpu/matmul_lib.py: awkward shapes, 1 and 2 threads, the few-row (decode) forward, the += semantics of
the backward, the null-pointer skips, bit-identical results for any thread count, and the parallel_for contract.
The "portable" build (no -march) runs simd.h's scalar back end, the code of the scalar WASM build."""
import numpy as np
import pytest

from bench.cpu.matmul_lib import MatmulLib

SHAPES = [(1, 7, 13), (33, 65, 17), (250, 96, 384), (1024, 192, 768), (7, 300, 5), (130, 520, 40)]
TOL = 1e-5  # max |err| / max |ref|, float32 sums of up to 1024 terms


@pytest.fixture(scope="module", params=["native", "portable"])
def lib(request):
    return MatmulLib(request.param)


def rel_err(got, ref):
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def operands(M, K, N, seed=0):
    rng = np.random.default_rng(seed + 1000 * M + 10 * K + N)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(M, K), f(N, K), f(N), f(M, N)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_forward_and_backward_match_float64(lib, threads, M, K, N):
    x, w, b, dout = operands(M, K, N)
    x64, w64, d64 = x.astype(np.float64), w.astype(np.float64), dout.astype(np.float64)
    with lib.pool(threads) as pool:
        out = np.full((M, N), np.nan, np.float32)  # overwritten, whatever it held
        lib.forward(pool, out, x, w, b)
        out_nobias = np.full((M, N), np.nan, np.float32)
        lib.forward(pool, out_nobias, x, w, None)
        # the backward accumulates: start from non-zero gradients
        dx0, dw0, db0 = operands(M, K, N, seed=1)[0], operands(M, K, N, seed=2)[1], operands(M, K, N, seed=3)[2]
        dx, dw, db = dx0.copy(), dw0.copy(), db0.copy()
        lib.backward(pool, dx, dw, db, dout, x, w)
    errs = {
        "out": rel_err(out, x64 @ w64.T + b),
        "out(no bias)": rel_err(out_nobias, x64 @ w64.T),
        "dinp": rel_err(dx, dx0 + d64 @ w64),
        "dweight": rel_err(dw, dw0 + d64.T @ x64),
        "dbias": rel_err(db, db0 + d64.sum(0)),
    }
    print(f"[{lib.simd}] threads={threads} M,K,N={M},{K},{N} max rel err " +
          " ".join(f"{k}={v:.2e}" for k, v in errs.items()))
    assert max(errs.values()) < TOL, errs


# The few-row forward (M <= 8: a KV-cache decode step has M = 1) takes dot products with the weight
# rows in place instead of the packed GEMM: awkward K and N (no multiple of 4, 8 or 16 lanes, K past
# its last full vector), an odd row, both sides of the 8-row switch, and widths whose columns split
# across threads (chunks of at least 8192 weights: (1, 96, 200) splits in two, (1, 7, 13) does not).
FEW_ROW_SHAPES = [(1, 1, 1), (1, 7, 13), (2, 19, 37), (1, 96, 200), (3, 97, 131), (1, 1000, 1100),
                  (3, 777, 1027), (8, 35, 23), (9, 35, 23)]


@pytest.mark.parametrize("M,K,N", FEW_ROW_SHAPES)
def test_few_row_forward_matches_float64(lib, M, K, N):
    x, w, b, _ = operands(M, K, N, seed=4)
    xw = x.astype(np.float64) @ w.astype(np.float64).T
    refs = {"bias": xw + b, "no bias": xw}
    outs = {}
    for threads in (1, 2):
        with lib.pool(threads) as pool:
            for label, bias in (("bias", b), ("no bias", None)):
                out = np.full((M, N), np.nan, np.float32)
                lib.forward(pool, out, x, w, bias)
                outs[label, threads] = out
    errs = {f"{label}, {t}T": rel_err(out, refs[label]) for (label, t), out in outs.items()}
    diff = max(float(np.abs(out.astype(np.float64) - refs[label]).max()) for (label, _), out in outs.items())
    print(f"[{lib.simd}] few rows M,K,N={M},{K},{N}: max |diff| {diff:.2e}, max rel err " +
          " ".join(f"{k}={v:.2e}" for k, v in errs.items()))
    assert max(errs.values()) < TOL, errs
    for label in refs:  # columns split across threads: each output is still computed by one tile
        assert np.array_equal(outs[label, 1], outs[label, 2])


@pytest.mark.parametrize("skip", ["dinp", "dweight", "dbias"])
def test_backward_skips_null_outputs(lib, skip):
    M, K, N = 37, 29, 23
    x, w, b, dout = operands(M, K, N)
    grads = {"dinp": np.zeros((M, K), np.float32), "dweight": np.zeros((N, K), np.float32),
             "dbias": np.zeros(N, np.float32)}
    grads[skip] = None
    with lib.pool(2) as pool:
        lib.backward(pool, grads["dinp"], grads["dweight"], grads["dbias"], dout, x, w)
    d64 = dout.astype(np.float64)
    refs = {"dinp": d64 @ w.astype(np.float64), "dweight": d64.T @ x.astype(np.float64), "dbias": d64.sum(0)}
    errs = {k: rel_err(g, refs[k]) for k, g in grads.items() if g is not None}
    print(f"[{lib.simd}] {skip}=null: max rel err " + " ".join(f"{k}={v:.2e}" for k, v in errs.items()))
    assert max(errs.values()) < TOL


def test_empty_reduction_gives_bias(lib):
    x, w, b = np.zeros((3, 0), np.float32), np.zeros((5, 0), np.float32), np.arange(5, dtype=np.float32)
    out = np.full((3, 5), np.nan, np.float32)
    with lib.pool(2) as pool:
        lib.forward(pool, out, x, w, b)
    assert np.array_equal(out, np.tile(b, (3, 1)))


def test_thread_count_does_not_change_a_bit(lib):
    M, K, N = 300, 200, 520  # several tiles, several K-slices
    x, w, b, dout = operands(M, K, N)
    results = []
    for threads in (1, 2, 3):
        with lib.pool(threads) as pool:
            out = np.empty((M, N), np.float32)
            lib.forward(pool, out, x, w, b)
            dx, dw, db = np.zeros((M, K), np.float32), np.zeros((N, K), np.float32), np.zeros(N, np.float32)
            lib.backward(pool, dx, dw, db, dout, x, w)
            results.append((out, dx, dw, db))
    for other in results[1:]:
        for a, c in zip(results[0], other):
            assert np.array_equal(a, c)


def strided(flat, offset, rows, cols, rs, cs):
    return np.lib.stride_tricks.as_strided(flat[offset:], (rows, cols), (rs * 4, cs * 4)).astype(np.float64)


# attention-like views into (B,T,C) = (2,37,24) tensors with H=3 heads of D=8: head h of batch b is
# rows b*T.., columns h*D.. with row stride C.
@pytest.mark.parametrize("case", ["q.kT", "p.v", "pT.dy", "generic"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_gemm_strided_matches_float64(lib, case, accumulate):
    T, C, D = 37, 24, 8
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal(2 * T * C).astype(np.float32), rng.standard_normal(2 * T * C).astype(np.float32)
    p = rng.standard_normal(T * T).astype(np.float32)
    off = T * C + D  # batch 1, head 1
    # (M, N, K, a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs)
    M, N, K, a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs = {
        "q.kT": (T, T, D, q, off, C, 1, k, off, 1, C),        # S = Q K^T
        "p.v": (T, D, T, p, 0, T, 1, k, off, C, 1),           # Y = P V
        "pT.dy": (T, D, T, p, 0, 1, T, q, off, C, 1),         # dV = P^T dY
        "generic": (13, 11, 9, q, 5, 3, 17, k, 2, 19, 7),     # no unit stride anywhere
    }[case]
    c0 = rng.standard_normal(M * (N + 3)).astype(np.float32)  # ldc = N + 3: C is a view too
    c = c0.copy()
    with lib.pool(1) as pool:
        lib.gemm_strided(pool, M, N, K, a[a_off:], a_rs, a_cs, b[b_off:], b_rs, b_cs, c, N + 3, accumulate)
    ref = strided(a, a_off, M, K, a_rs, a_cs) @ strided(b, b_off, K, N, b_rs, b_cs)
    if accumulate:
        ref += c0.reshape(M, N + 3)[:, :N]
    got = c.reshape(M, N + 3)
    err = rel_err(got[:, :N], ref)
    print(f"[{lib.simd}] gemm_strided {case} accumulate={accumulate}: max rel err {err:.2e}")
    assert err < TOL
    assert np.array_equal(got[:, N:], c0.reshape(M, N + 3)[:, N:])  # the padding columns untouched


# One row of A (a decoded token's attention: one query) takes dot products or row sums where the
# operands lie instead of the packed GEMM: one query's scores against T keys (B's columns contiguous),
# its output from T value rows (B's rows contiguous), and the latter with A strided. The row sums take
# strips of 4, 2 and 1 vectors, then single columns: D = 8 is all columns on AVX-512 (and its dot
# products no whole vector), 48 and 80 are strips of each size on one back end or another.
@pytest.mark.parametrize("case", ["q.kT", "p.v", "pT.dy"])
@pytest.mark.parametrize("D", [8, 48, 80])
@pytest.mark.parametrize("accumulate", [False, True])
def test_gemm_strided_one_row_matches_float64(lib, case, D, accumulate):
    T, H = 37, 3
    C = H * D
    rng = np.random.default_rng(11)
    q, k = rng.standard_normal(T * C).astype(np.float32), rng.standard_normal(T * C).astype(np.float32)
    p = rng.standard_normal(T * T).astype(np.float32)
    off, t = D, 5  # head 1; query row t
    M, N, K, a, a_off, a_rs, a_cs, b, b_off, b_rs, b_cs = {
        "q.kT": (1, T, D, q, t * C + off, C, 1, k, off, 1, C),   # s = q K^T
        "p.v": (1, D, T, p, t * T, T, 1, k, off, C, 1),          # y = p V
        "pT.dy": (1, D, T, p, t, 1, T, q, off, C, 1),            # a column of P: A strided
    }[case]
    c0 = rng.standard_normal(N + 3).astype(np.float32)
    c = c0.copy()
    with lib.pool(1) as pool:
        lib.gemm_strided(pool, M, N, K, a[a_off:], a_rs, a_cs, b[b_off:], b_rs, b_cs, c, N + 3, accumulate)
    ref = strided(a, a_off, M, K, a_rs, a_cs) @ strided(b, b_off, K, N, b_rs, b_cs)
    if accumulate:
        ref += c0[:N]
    err = rel_err(c[:N], ref[0])
    print(f"[{lib.simd}] gemm_strided one row {case} D={D} accumulate={accumulate}: max rel err {err:.2e}")
    assert err < TOL
    assert np.array_equal(c[N:], c0[N:])


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("n,min_chunk", [(0, 1), (1, 1), (2, 1), (7, 1), (1000, 1), (1000, 400), (1000, 2000)])
def test_parallel_for_covers_range_once(lib, threads, n, min_chunk):
    with lib.pool(threads) as pool:
        for _ in range(50):  # repeated calls reuse the same workers
            counts, chunks = lib.cover(pool, n, min_chunk)
            assert (counts == 1).all()
            # parallel_for_scratch splits into up to ThreadPool::kChunksPerThread (4) chunks per thread
            most = 1 if threads == 1 else 4 * threads
            assert chunks <= min(most, max(1, n // min_chunk)) and (chunks >= 1 or n == 0)


def test_simd_exp_and_tanh(lib):
    x = np.concatenate([np.linspace(-87.3, 88.3, 200_001), [0.0, -1e-30, 1e-7, -20.5]]).astype(np.float32)
    x64 = x.astype(np.float64)
    exp_err = float(np.max(np.abs(lib.simd_exp(x) - np.exp(x64)) / np.exp(x64)))
    t = np.linspace(-12, 12, 100_001).astype(np.float32)
    tanh_err = float(np.max(np.abs(lib.simd_tanh(t) - np.tanh(t.astype(np.float64)))))
    clamped = lib.simd_exp(np.array([-np.inf, -200.0, 200.0, np.inf], np.float32))
    print(f"[{lib.simd}] simd exp max rel err {exp_err:.2e}; tanh max abs err {tanh_err:.2e}; "
          f"exp(-inf, -200, 200, inf) = {clamped}")
    assert exp_err < 5e-7 and tanh_err < 2e-7
    assert np.all(np.isfinite(clamped)) and clamped[0] < 1.5e-38 and clamped[3] > 1e38
