"""Builds and loads the small shared library of bench/cpu/matmul_shim.cpp (matmul + thread pool
only, no model) that tests/wasm/test_native_matmul.py and the matmul benchmark drive through ctypes.

Variants: "native" (-O3 -march=native: the SIMD back end of this CPU), "portable" (-O3 without
-march, which on x86-64 selects simd.h's scalar back end, the code path of the scalar WASM build)
and "avx2" (-mavx2 -mfma: the AVX2 back end, e.g. on an AVX-512 machine). Rebuilt only when a
source is newer than the library.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "bench/cpu/matmul_shim.cpp", ROOT / "wasm/src/matmul.cpp", ROOT / "wasm/src/thread_pool.cpp"]
HEADERS = [ROOT / "wasm/src/matmul.h", ROOT / "wasm/src/thread_pool.h", ROOT / "wasm/src/simd.h"]
FLAGS = {"native": ["-O3", "-march=native"], "portable": ["-O3"], "avx2": ["-O3", "-mavx2", "-mfma"]}


def build_dir() -> Path:
    return Path(os.environ.get("TINYGPT_BUILD", ROOT / "build")) / "native"


def build(variant: str = "native") -> Path:
    out = build_dir() / f"libtgmatmul_{variant}.so"
    newest = max(p.stat().st_mtime for p in SOURCES + HEADERS)
    if not out.exists() or out.stat().st_mtime < newest:
        out.parent.mkdir(parents=True, exist_ok=True)
        cxx = os.environ.get("CXX", "g++")
        cmd = [cxx, *FLAGS[variant], "-std=c++17", "-pthread", "-shared", "-fPIC", "-Wall", "-Wextra",
               "-Werror", "-o", str(out) + ".tmp", *map(str, SOURCES)]
        subprocess.run(cmd, check=True)
        os.replace(str(out) + ".tmp", out)
    return out


_P = ctypes.c_void_p
_I = ctypes.c_int64


def _ptr(a):
    return None if a is None else a.ctypes.data


class MatmulLib:
    """ctypes wrapper; arrays must be C-contiguous float32 numpy arrays."""

    def __init__(self, variant: str = "native"):
        lib = ctypes.CDLL(str(build(variant)))
        lib.tgmm_pool_create.restype = _P
        lib.tgmm_pool_create.argtypes = [ctypes.c_int]
        lib.tgmm_pool_destroy.argtypes = [_P]
        lib.tgmm_pool_size.argtypes = [_P]
        lib.tgmm_simd_name.restype = ctypes.c_char_p
        lib.tgmm_forward.argtypes = [_P, _P, _P, _P, _I, _I, _I, _P]
        lib.tgmm_backward.argtypes = [_P, _P, _P, _P, _P, _P, _I, _I, _I, _P]
        lib.tgmm_repeat_step.argtypes = [ctypes.c_int, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _P]
        lib.tgmm_pool_cover.argtypes = [_P, _I, _I, _P, _P]
        lib.tgmm_pool_roundtrip.argtypes = [_P, _I, _I]
        lib.tgmm_pool_roundtrip.restype = ctypes.c_double
        lib.tgmm_simd_apply.argtypes = [_P, _P, _I, ctypes.c_int]
        lib.tgmm_gemm_strided.argtypes = [_I, _I, _I, _P, _I, _I, _P, _I, _I, _P, _I, ctypes.c_int, _P]
        self.lib = lib
        self.simd = lib.tgmm_simd_name().decode()

    def pool(self, n_threads: int) -> "Pool":
        return Pool(self.lib, n_threads)

    def forward(self, pool, out, inp, weight, bias):
        M, K = inp.shape
        N = weight.shape[0]
        self.lib.tgmm_forward(_ptr(out), _ptr(inp), _ptr(weight), _ptr(bias), M, K, N, pool.handle)

    def backward(self, pool, dinp, dweight, dbias, dout, inp, weight):
        M, K = inp.shape
        N = weight.shape[0]
        self.lib.tgmm_backward(_ptr(dinp), _ptr(dweight), _ptr(dbias), _ptr(dout), _ptr(inp), _ptr(weight),
                               M, K, N, pool.handle)

    def repeat_step(self, pool, reps, out, inp, weight, bias, dinp, dweight, dbias, dout):
        M, K = inp.shape
        N = weight.shape[0]
        self.lib.tgmm_repeat_step(reps, _ptr(out), _ptr(inp), _ptr(weight), _ptr(bias), _ptr(dinp),
                                  _ptr(dweight), _ptr(dbias), _ptr(dout), M, K, N, pool.handle)

    def gemm_strided(self, pool, M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate):
        """C = A·B or C += A·B on strided views of flat float32 arrays (strides in elements)."""
        self.lib.tgmm_gemm_strided(M, N, K, _ptr(a), a_rs, a_cs, _ptr(b), b_rs, b_cs, _ptr(c), ldc,
                                   int(accumulate), pool.handle)

    def pool_roundtrip(self, pool, n: int = 2, iters: int = 20000) -> float:
        """Seconds per parallel_for of n trivial items: the fork-join overhead."""
        return self.lib.tgmm_pool_roundtrip(pool.handle, n, iters)

    def simd_exp(self, x):
        y = np.empty_like(x)
        self.lib.tgmm_simd_apply(_ptr(x), _ptr(y), x.size, 0)
        return y

    def simd_tanh(self, x):
        y = np.empty_like(x)
        self.lib.tgmm_simd_apply(_ptr(x), _ptr(y), x.size, 1)
        return y

    def cover(self, pool, n: int, min_chunk: int):
        """(per-item visit counts, number of chunks) of one parallel_for_scratch over [0, n)."""
        counts = np.zeros(max(n, 1), dtype=np.int32)
        chunks = ctypes.c_int64(0)
        self.lib.tgmm_pool_cover(pool.handle, n, min_chunk, _ptr(counts), ctypes.byref(chunks))
        return counts[:n], chunks.value


class Pool:
    def __init__(self, lib, n_threads: int):
        self.lib = lib
        self.handle = lib.tgmm_pool_create(n_threads)
        self.size = lib.tgmm_pool_size(self.handle)

    def close(self):
        if self.handle:
            self.lib.tgmm_pool_destroy(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
