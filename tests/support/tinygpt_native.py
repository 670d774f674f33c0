"""The native libtinygpt.so (wasm/src/tinygpt_api.h) for the Python tests, through the ctypes
binding generated from the header (scripts/api_ctypes.py).

`NativeModel` wraps one tg_model handle; every negative result becomes a NativeError carrying the
code and tg_last_error()'s message. ensure_built() runs the native part of the Makefile (a no-op
when it is up to date) so the tests also work when pytest is started on its own.
"""
from __future__ import annotations

import ctypes as C
import os
import subprocess
from pathlib import Path

import numpy as np

from python_ref.config import ModelConfig, init_std
from scripts.api_ctypes import Binding

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))
NATIVE = BUILD / "native"

_binding = None
_built = False


class NativeError(RuntimeError):
    def __init__(self, code: int, message: str):
        super().__init__(f"{message} (code {code})")
        self.code = code


def ensure_built() -> None:
    """Once per process: later calls would only re-check, and relinking a program another test is
    running fails with 'Text file busy'."""
    global _built
    if not _built:
        subprocess.run(["make", "-s", "native", f"BUILD={BUILD}"], cwd=ROOT, check=True)
        _built = True


def binding() -> Binding:
    global _binding
    if _binding is None:
        ensure_built()
        _binding = Binding(NATIVE / "libtinygpt.so")
    return _binding


def lib():
    return binding().lib


def _check(result):
    if result < 0:
        raise NativeError(int(result), lib().tg_last_error().decode())
    return result


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(C.c_void_p)


def _tokens(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int32)


def lora_struct(lora):
    """A tg_lora_config from a python_ref LoRAConfig."""
    from python_ref.lora import target_mask
    return binding().struct("tg_lora_config", {"rank": lora.rank, "alpha": lora.alpha,
                                               "targets": target_mask(lora.targets)})


class NativeModel:
    """One native model. config: python_ref ModelConfig; batch: the arena's largest batch; lora: a
    python_ref LoRAConfig for a LoRA model (tg_create_lora), whose seed tg_lora_init uses."""

    def __init__(self, config: ModelConfig, batch: int, n_threads: int = 1, lora=None):
        L = lib()
        self.config, self.batch, self.lora = config, batch, lora
        tg_config = binding().struct("tg_config", config.to_json() | {"initStd": init_std()})
        if lora is None:
            self.h = L.tg_create(C.byref(tg_config), batch, n_threads)
        else:
            self.h = L.tg_create_lora(C.byref(tg_config), C.byref(lora_struct(lora)), batch, n_threads)
        if not self.h:
            raise NativeError(L.tg_last_error_code(), L.tg_last_error().decode())
        self.P = L.tg_param_count(self.h)
        self.Q = L.tg_lora_param_count(self.h)

    def close(self):
        if self.h:
            lib().tg_destroy(self.h)
            self.h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- set-up
    def init(self, seed: int):
        _check(lib().tg_init(self.h, seed))

    def set_hyper(self, lr, beta1, beta2, eps, weight_decay, grad_clip):
        _check(lib().tg_set_hyper(self.h, lr, beta1, beta2, eps, weight_decay, grad_clip))

    def set_hyper_from(self, train_config):
        t = train_config
        self.set_hyper(t.lr, t.beta1, t.beta2, t.eps, t.weightDecay, t.gradClip)

    def set_corpus(self, data: bytes | np.ndarray, val_fraction: float):
        buf = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        _check(lib().tg_set_corpus(self.h, _ptr(buf), buf.size, val_fraction))

    def set_data_state(self, seed: int, batches_drawn: int):
        _check(lib().tg_set_data_state(self.h, seed, batches_drawn))

    @property
    def batches_drawn(self) -> int:
        return _check(lib().tg_batches_drawn(self.h))

    def next_batch(self):
        T = self.config.ctx
        x = np.empty((self.batch, T), np.int32)
        y = np.empty((self.batch, T), np.int32)
        _check(lib().tg_next_batch(self.h, _ptr(x), _ptr(y)))
        return x, y

    # --- compute
    def train_step(self) -> float:
        return _check(lib().tg_train_step(self.h))

    def train_step_stats(self) -> tuple[float, np.ndarray]:
        """tg_train_step_stats: (loss, (n, 3) float64 sums per trained tensor: g^2, w^2, update^2)."""
        L = lib()
        n = L.tg_lora_tensor_count(self.h) if self.lora is not None else L.tg_tensor_count(self.h)
        out = np.full((n, 3), np.nan, np.float64)
        loss = _check(L.tg_train_step_stats(self.h, _ptr(out)))
        return loss, out

    def train_step_batch(self, x, y) -> float:
        x, y = _tokens(x), _tokens(y)
        return _check(lib().tg_train_step_batch(self.h, _ptr(x), _ptr(y), x.shape[0], x.shape[1]))

    def forward_backward(self, x, y) -> float:
        x, y = _tokens(x), _tokens(y)
        return _check(lib().tg_forward_backward(self.h, _ptr(x), _ptr(y), x.shape[0], x.shape[1]))

    def forward_loss(self, x, y) -> float:
        x, y = _tokens(x), _tokens(y)
        return _check(lib().tg_forward_loss(self.h, _ptr(x), _ptr(y), x.shape[0], x.shape[1]))

    def eval(self, eval_windows: int) -> float:
        return _check(lib().tg_eval(self.h, eval_windows))

    @property
    def step(self) -> int:
        return _check(lib().tg_step(self.h))

    # --- tensors (copies, in manifest order and shapes)
    def _flat(self, ptr) -> np.ndarray:
        return np.ctypeslib.as_array(ptr, shape=(self.P,)).copy()

    def tensors(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        from python_ref.model import manifest
        out, offset = {}, 0
        for name, shape in manifest(self.config):
            n = int(np.prod(shape))
            out[name] = flat[offset:offset + n].reshape(shape)
            offset += n
        return out

    def weights(self) -> dict[str, np.ndarray]:
        return self.tensors(self._flat(lib().tg_weights(self.h)))

    def grads(self) -> dict[str, np.ndarray]:
        return self.tensors(self._flat(lib().tg_grads(self.h)))

    def manifest(self) -> list[tuple[str, int, int]]:
        L = lib()
        return [(L.tg_tensor_name(self.h, i).decode(), L.tg_tensor_offset(self.h, i), L.tg_tensor_numel(self.h, i))
                for i in range(L.tg_tensor_count(self.h))]

    # --- generation
    def generate(self, prompt: bytes, max_new: int, temperature: float, top_k: int, seed: int,
                 use_cache: bool = True) -> bytes:
        p = _tokens(np.frombuffer(prompt, dtype=np.uint8))
        out = np.zeros(max(max_new, 1), np.int32)
        n = _check(lib().tg_generate(self.h, _ptr(p), p.size, max_new, temperature, top_k, seed,
                                     int(use_cache), _ptr(out)))
        return bytes(out[:n].astype(np.uint8))

    def generate_with_probs(self, prompt: bytes, max_new: int, temperature: float, top_k: int,
                            seed: int) -> list[tuple[int, np.ndarray]]:
        """Token-at-a-time generation (tg_gen_next), each byte with tg_gen_last_probs (V,)."""
        L = lib()
        p = _tokens(np.frombuffer(prompt, dtype=np.uint8))
        _check(L.tg_gen_begin(self.h, _ptr(p), p.size, temperature, top_k, seed, 1))
        out = []
        for _ in range(max_new):
            token = _check(L.tg_gen_next(self.h))
            probs = np.empty(self.config.vocabSize, np.float32)
            _check(L.tg_gen_last_probs(self.h, _ptr(probs)))
            out.append((token, probs))
        return out

    # --- a look inside
    def attention(self, tokens) -> np.ndarray:
        """tg_attention: (L,H,T,T) attention probabilities of one sequence."""
        t = _tokens(np.frombuffer(bytes(tokens), dtype=np.uint8))
        c = self.config
        out = np.empty((c.nLayer, c.nHead, t.size, t.size), np.float32)
        _check(lib().tg_attention(self.h, _ptr(t), t.size, _ptr(out)))
        return out

    def attention_entropy(self, tokens) -> np.ndarray:
        """tg_attention_entropy: (L,H) mean attention entropy per head of one sequence, in nats."""
        t = _tokens(np.frombuffer(bytes(tokens), dtype=np.uint8))
        out = np.empty((self.config.nLayer, self.config.nHead), np.float64)
        _check(lib().tg_attention_entropy(self.h, _ptr(t), t.size, _ptr(out)))
        return out

    # --- state
    def state_size(self, with_moments: bool) -> int:
        return _check(lib().tg_state_bytes(self.h, int(with_moments)))

    def export_state(self, with_moments: bool = True) -> bytes:
        n = self.state_size(with_moments)
        buf = np.empty(n, np.uint8)
        _check(lib().tg_export_state(self.h, _ptr(buf), n, int(with_moments)))
        return buf.tobytes()

    def import_state(self, data: bytes):
        buf = np.frombuffer(data, dtype=np.uint8)
        _check(lib().tg_import_state(self.h, _ptr(buf) if buf.size else None, buf.size))

    @property
    def arena_bytes(self) -> int:
        return _check(lib().tg_arena_bytes(self.h))

    # --- LoRA (a model made with lora=...)
    def lora_init(self, seed: int | None = None):
        _check(lib().tg_lora_init(self.h, self.lora.seed if seed is None else seed))

    def lora_manifest(self) -> list[tuple[str, int, int]]:
        L = lib()
        return [(L.tg_lora_tensor_name(self.h, i).decode(), L.tg_lora_tensor_offset(self.h, i),
                 L.tg_lora_tensor_numel(self.h, i)) for i in range(L.tg_lora_tensor_count(self.h))]

    def _adapters(self, ptr) -> dict[str, np.ndarray]:
        from python_ref.lora import adapter_manifest
        if not ptr:
            raise NativeError(lib().tg_last_error_code(), lib().tg_last_error().decode())
        flat = np.ctypeslib.as_array(ptr, shape=(self.Q,)).copy()
        out, offset = {}, 0
        for name, shape in adapter_manifest(self.config, self.lora):
            n = int(np.prod(shape))
            out[name] = flat[offset:offset + n].reshape(shape)
            offset += n
        return out

    def lora_weights(self) -> dict[str, np.ndarray]:
        return self._adapters(lib().tg_lora_weights(self.h))

    def lora_grads(self) -> dict[str, np.ndarray]:
        return self._adapters(lib().tg_lora_grads(self.h))

    def lora_export(self, with_moments: bool = True) -> bytes:
        n = _check(lib().tg_lora_state_bytes(self.h, int(with_moments)))
        buf = np.empty(n, np.uint8)
        _check(lib().tg_lora_export_state(self.h, _ptr(buf), n, int(with_moments)))
        return buf.tobytes()

    def lora_import(self, data: bytes):
        buf = np.frombuffer(data, dtype=np.uint8)
        _check(lib().tg_lora_import_state(self.h, _ptr(buf) if buf.size else None, buf.size))

    def lora_merge(self):
        _check(lib().tg_lora_merge(self.h))

    def lora_unmerge(self):
        _check(lib().tg_lora_unmerge(self.h))

    def lora_set_enabled(self, enabled: bool):
        _check(lib().tg_lora_set_enabled(self.h, int(enabled)))

    @property
    def lora_merged(self) -> bool:
        return bool(_check(lib().tg_lora_merged(self.h)))


def state_bytes_of_file(path) -> bytes:
    """The state part of a .tinygpt file (after the 12-byte prefix and the header), as written."""
    raw = Path(path).read_bytes()
    header_len = int.from_bytes(raw[8:12], "little")
    return raw[12 + header_len:]


def checkpoint_from_state(config: ModelConfig, state: bytes):
    """A python_ref CheckpointState holding the arrays of a native state, for write_state."""
    from python_ref.model import manifest
    from python_ref.tinygpt_file import CheckpointState
    P = config.param_count()
    step = int.from_bytes(state[:4], "little", signed=True)
    flat = np.frombuffer(state, dtype="<f4", offset=4)
    blocks = flat.size // P
    named = []
    for b in range(blocks):
        block, offset = {}, b * P
        for name, shape in manifest(config):
            n = int(np.prod(shape))
            block[name] = flat[offset:offset + n].reshape(shape)
            offset += n
        named.append(block)
    m, v = (named[1], named[2]) if blocks == 3 else (None, None)
    return CheckpointState(config, step, named[0], m, v)
