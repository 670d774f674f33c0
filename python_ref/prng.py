"""Portable randomness: SplitMix64 + Box-Muller built from IEEE-754 double +, -, *, /, sqrt only.

docs/determinism.md is the specification; C++ and JS implement the same steps, so the same seed
gives bit-identical initial weights and the same batches at every level. log and cos are written
out as fixed polynomials because libm/Math.cos differ by an ulp between platforms, and an ulp in
float64 can flip a float32 rounding.

SplitMix64 is counter-based: output n of a stream is mix(state0 + (n+1) * GAMMA), so any slice of
a stream can be computed directly and in parallel (here: vectorised in numpy).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from math import factorial

import numpy as np

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
DATA_STREAM_KEY = 0xD6E8FEB86659FD93
SAMPLE_STREAM_KEY = 0x2545F4914F6CDD1D

TWO_POW_MINUS_53 = 2.0**-53
LN2 = 0.6931471805599453
SQRT_HALF = 0.7071067811865476
HALF_PI = 1.5707963267948966
SERIES_TERMS = 12
# Coefficients are the doubles nearest to the exact rationals (what float(Fraction) gives).
LOG_COEFFS = tuple(float(Fraction(1, 2 * k + 1)) for k in range(SERIES_TERMS))
COS_COEFFS = tuple(float(Fraction((-1) ** k, factorial(2 * k))) for k in range(SERIES_TERMS))
SIN_COEFFS = tuple(float(Fraction((-1) ** k, factorial(2 * k + 1))) for k in range(SERIES_TERMS))

_U = np.uint64


def splitmix64(state0: int, start: int, count: int) -> np.ndarray:
    """Outputs start .. start+count-1 of the SplitMix64 stream whose initial state is state0."""
    n = np.arange(start + 1, start + 1 + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = _U(state0 & MASK64) + n * _U(GAMMA)
        z = (z ^ (z >> _U(30))) * _U(MIX1)
        z = (z ^ (z >> _U(27))) * _U(MIX2)
    return z ^ (z >> _U(31))


def uniform_open0(x: np.ndarray) -> np.ndarray:
    """(0, 1]: ((x >> 11) + 1) * 2^-53, exact in float64."""
    return ((x >> _U(11)) + _U(1)).astype(np.float64) * TWO_POW_MINUS_53


def uniform(x: np.ndarray) -> np.ndarray:
    """[0, 1): (x >> 11) * 2^-53, exact in float64."""
    return (x >> _U(11)).astype(np.float64) * TWO_POW_MINUS_53


def portable_log(x: np.ndarray) -> np.ndarray:
    """Natural log for positive normal doubles: x = m 2^e, m in [sqrt(1/2), sqrt(2)), atanh series."""
    m, e = np.frexp(x)
    low = m < SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = np.where(low, e - 1, e).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = np.full_like(s, LOG_COEFFS[-1])
    for c in reversed(LOG_COEFFS[:-1]):
        p = p * s2 + c
    return e * LN2 + (2.0 * s) * p


def portable_cos_2pi(u: np.ndarray) -> np.ndarray:
    """cos(2 pi u) for u in [0, 1): exact quadrant split of 4u, then Taylor series on [0, pi/2)."""
    t = u * 4.0
    q = np.floor(t)
    a = (t - q) * HALF_PI
    a2 = a * a
    c = np.full_like(a, COS_COEFFS[-1])
    s = np.full_like(a, SIN_COEFFS[-1])
    for cc, sc in zip(reversed(COS_COEFFS[:-1]), reversed(SIN_COEFFS[:-1])):
        c = c * a2 + cc
        s = s * a2 + sc
    s = a * s
    return np.select([q == 0, q == 1, q == 2], [c, -s, -c], s)


def normals(state0: int, first: int, count: int) -> np.ndarray:
    """Standard normals first .. first+count-1 of a stream, in float64. Normal j uses outputs 2j, 2j+1."""
    x = splitmix64(state0, 2 * first, 2 * count)
    u1 = uniform_open0(x[0::2])
    u2 = uniform(x[1::2])
    return np.sqrt(-2.0 * portable_log(u1)) * portable_cos_2pi(u2)


def normal_float32(state0: int, first: int, count: int, std: float) -> np.ndarray:
    """float32(z * std): the product is rounded once, to nearest even, from float64.

    A long run is drawn in chunks, on threads. Each normal depends on its own index alone, and numpy
    releases the GIL in these element-wise steps, so the values are the same bit for bit, sooner:
    behemoth's init took 112-119 s in one piece on a 16-core GPU host, 25-26 s in chunks on its threads
    (2 cores: 56 s and 12.5 s), and every process of a torchrun launch draws all of it.
    """
    out = np.empty(count, dtype=np.float32)

    def fill(start: int) -> None:
        end = min(start + NORMAL_CHUNK, count)
        out[start:end] = (normals(state0, first + start, end - start) * std).astype(np.float32)

    starts = range(0, count, NORMAL_CHUNK)
    threads = min(_init_threads(), len(starts))
    if threads <= 1:
        for start in starts:
            fill(start)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fill, starts))
    return out


# normals per chunk: each step's temporaries (~0.5-1 MB) stay in a core's cache; on 2 cores, 10M
# normals took 0.25 s in chunks of 2^16, 0.56 s in chunks of 2^20 and 1.0-3.3 s in one piece
NORMAL_CHUNK = 1 << 16


def _init_threads() -> int:
    """This process's share of the CPUs it may run on: the processes torchrun starts on a host split them."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def data_stream_state(seed: int) -> int:
    return (seed ^ DATA_STREAM_KEY) & MASK64


def sample_stream_state(seed: int) -> int:
    return (seed ^ SAMPLE_STREAM_KEY) & MASK64


def batch_offsets(seed: int, batch_index: int, batch: int, n_starts: int) -> np.ndarray:
    """Window starts of batch number batch_index: output k of the data stream gives (x >> 11) % n_starts."""
    x = splitmix64(data_stream_state(seed), batch_index * batch, batch)
    return ((x >> _U(11)) % _U(n_starts)).astype(np.int64)


class SampleStream:
    """Sequential uniforms for sampling tokens; `drawn` is all the state there is."""

    def __init__(self, seed: int, drawn: int = 0):
        self.state0 = sample_stream_state(seed)
        self.drawn = drawn

    def next_uniform(self) -> float:
        x = splitmix64(self.state0, self.drawn, 1)
        self.drawn += 1
        return float(uniform(x)[0])
