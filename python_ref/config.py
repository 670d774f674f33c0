"""The one source of truth for presets, defaults and the rules of every config field:
site/static/presets.json.

Python, the JS worker and the C++ core all read that file; nothing here repeats its numbers. Its
"rules" section says what each field accepts; field_problem() below turns a rule into the same
sentence webgpu/config_rules.js and the C++ core (wasm/src/config_rules.cpp) write, so a bad value is
refused in the same words at every level (tests/site/test_config_rules.py).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
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


def rules() -> dict:
    """presets.json's "rules": per section (model, training, lora, sampling, page) each field's rule, and
    the checks across fields."""
    return presets_file()["rules"]


def show(value) -> str:
    """A value as every level writes it in a message: Python's repr, except that an int-valued number
    from JSON shows without ".0" at the levels that cannot tell 8.0 from 8 (JS, C++), and nan / inf
    as Python spells them."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return repr(value)


def _show_bound(x) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else repr(float(x))


def rule_text(rule: dict) -> str:
    """'an integer in [1, 4096]', 'a finite number > 0', 'a number > 0 (inf: no clipping)'..."""
    kind = "an integer" if rule["type"] == "integer" else "a number" if "infinity" in rule else "a finite number"
    low = ("[", rule["min"]) if "min" in rule else ("(", rule["above"]) if "above" in rule else None
    high = ("]", rule["max"]) if "max" in rule else (")", rule["below"]) if "below" in rule else None
    if low and high:
        text = f"{kind} in {low[0]}{_show_bound(low[1])}, {_show_bound(high[1])}{high[0]}"
    elif low:
        text = f"{kind} {'>=' if low[0] == '[' else '>'} {_show_bound(low[1])}"
    elif high:
        text = f"{kind} {'<=' if high[0] == ']' else '<'} {_show_bound(high[1])}"
    else:
        text = kind
    notes = [f"{at}: {rule[key]}" for key, at in (("zero", "0"), ("infinity", "inf")) if key in rule]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def field_problem(section: str, name: str, value) -> str | None:
    """None if `value` is one rules[section][name] accepts, else the sentence saying why not."""
    rule = rules()[section][name]
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if rule["type"] == "integer":
        ok = is_int
    else:
        ok = (is_int or isinstance(value, float)) and not math.isnan(value) and \
            (not math.isinf(value) or (value > 0 and "infinity" in rule))
    ok = ok and (("min" not in rule or value >= rule["min"]) and ("above" not in rule or value > rule["above"])
                 and ("max" not in rule or value <= rule["max"]) and ("below" not in rule or value < rule["below"]))
    return None if ok else f"{name} must be {rule_text(rule)}, got {show(value)}"


def check_fields(section: str, values: dict) -> None:
    """Raises ConfigError for the first field of `values` (in the rules' order) that its rule
    refuses, then for the first check across fields that fails."""
    for name in rules()[section]:
        if name in values:
            problem = field_problem(section, name, values[name])
            if problem:
                raise ConfigError(problem)
    for check in rules().get("checks", {}).get(section, []):
        a, b = check["divisible"]
        if a in values and b in values and values[a] % values[b] != 0:
            raise ConfigError(check["message"].format(**{a: values[a], b: values[b]}))


def _model_default(key: str):
    return field(default_factory=lambda: presets_file()["model"][key])


@dataclass(frozen=True)
class ModelConfig:
    nLayer: int
    nHead: int
    dModel: int
    ctx: int
    vocabSize: int = _model_default("vocabSize")
    layerNormEps: float = _model_default("layerNormEps")

    def __post_init__(self):
        check_fields("model", asdict(self))

    @property
    def head_dim(self) -> int:
        return self.dModel // self.nHead

    def param_count(self) -> int:
        """VC + ctx*C + 2C + L(12C^2 + 13C) for vocab V (token embedding tied to the head)."""
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
        check_fields("training", asdict(self))

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
    value = presets_file()["model"]["initStd"]
    check_fields("model", {"initStd": value})
    return value
