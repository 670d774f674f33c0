"""The one source of truth for presets and defaults: site/static/presets.json.

Python, the JS worker and the C++ core all read that file; nothing here repeats its numbers.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from .resources import ROOT

# The folder holding python_ref/ (the checkout, or site-packages): torchrun workers import from it.
REPO_ROOT = Path(__file__).resolve().parent.parent
PRESETS_PATH = ROOT / "site" / "static" / "presets.json"
DEFAULT_CORPUS = ROOT / "site" / "static" / "data" / "tinyshakespeare.txt"


class ConfigError(ValueError):
    """A model or training configuration that cannot work."""


@lru_cache(maxsize=1)
def presets_file() -> dict:
    return json.loads(PRESETS_PATH.read_text())


@dataclass(frozen=True)
class ModelConfig:
    nLayer: int
    nHead: int
    dModel: int
    ctx: int
    vocabSize: int = 256
    layerNormEps: float = 1e-5

    def __post_init__(self):
        for name in ("nLayer", "nHead", "dModel", "ctx", "vocabSize"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.dModel % self.nHead != 0:
            raise ConfigError(
                f"dModel ({self.dModel}) is not divisible by nHead ({self.nHead}): "
                "each head needs dModel / nHead channels"
            )
        eps = self.layerNormEps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < float("inf"):
            raise ConfigError(f"layerNormEps must be a positive finite number, got {eps!r}")

    @property
    def head_dim(self) -> int:
        return self.dModel // self.nHead

    def param_count(self) -> int:
        """256C + ctx*C + 2C + L(12C^2 + 13C) for vocab 256 (token embedding tied to the head)."""
        C, L = self.dModel, self.nLayer
        return self.vocabSize * C + self.ctx * C + 2 * C + L * (12 * C * C + 13 * C)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "ModelConfig":
        if not isinstance(d, dict):
            raise ConfigError(f"model config must be an object, got {type(d).__name__}")
        fields = ("nLayer", "nHead", "dModel", "ctx", "vocabSize", "layerNormEps")
        missing = [f for f in fields[:4] if f not in d]
        if missing:
            raise ConfigError(f"model config lacks {', '.join(missing)}")
        return cls(**{f: d[f] for f in fields if f in d})


@dataclass(frozen=True)
class TrainConfig:
    batch: int
    steps: int
    lr: float
    beta1: float
    beta2: float
    eps: float
    weightDecay: float
    gradClip: float
    valFraction: float
    evalEvery: int
    evalWindows: int
    seed: int

    def __post_init__(self):
        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        def is_number(v):  # finite int or float, not bool (NaN fails every comparison below)
            return (is_int(v) or isinstance(v, float)) and abs(v) < float("inf")

        for name in ("batch", "evalWindows"):
            if not (is_int(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not (is_int(self.evalEvery) and self.evalEvery >= 0):  # 0: evaluate only at the end
            raise ConfigError(f"evalEvery must be a non-negative integer (0: only at the end), got {self.evalEvery!r}")
        if not (is_int(self.steps) and self.steps >= 0):
            raise ConfigError(f"steps must be a non-negative integer, got {self.steps!r}")
        if not (is_number(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a positive number, got {self.lr!r}")
        for name in ("beta1", "beta2"):
            if not (is_number(getattr(self, name)) and 0 <= getattr(self, name) < 1):
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if not (is_number(self.eps) and self.eps > 0):
            raise ConfigError(f"eps must be a positive number, got {self.eps!r}")
        for name in ("weightDecay", "gradClip"):
            if not (is_number(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"{name} must be a non-negative number, got {getattr(self, name)!r}")
        if not (is_number(self.valFraction) and 0 < self.valFraction < 1):
            raise ConfigError(f"valFraction must be in (0, 1), got {self.valFraction!r}")
        if not (is_int(self.seed) and 0 <= self.seed < 2**53):
            raise ConfigError(f"seed must be an integer in [0, 2^53), got {self.seed!r}")

    def to_json(self) -> dict:
        return asdict(self)


def preset_names() -> list[str]:
    return list(presets_file()["presets"])


def model_config(preset: str) -> ModelConfig:
    f = presets_file()
    if preset not in f["presets"]:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(f['presets'])}")
    p = f["presets"][preset]
    m = f["model"]
    return ModelConfig(
        nLayer=p["nLayer"], nHead=p["nHead"], dModel=p["dModel"], ctx=p["ctx"],
        vocabSize=m["vocabSize"], layerNormEps=m["layerNormEps"],
    )


def train_config(preset: str, **overrides) -> TrainConfig:
    f = presets_file()
    if preset not in f["presets"]:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(f['presets'])}")
    p = f["presets"][preset]
    values = dict(f["training"], batch=p["batch"], steps=p["steps"])
    for key, value in overrides.items():
        if value is not None:
            values[key] = value
    return TrainConfig(**values)


def sampling_defaults() -> dict:
    return dict(presets_file()["sampling"])


def init_std() -> float:
    return presets_file()["model"]["initStd"]
