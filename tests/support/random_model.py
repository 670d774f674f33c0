"""A .tinygpt of random weights with a wide spread, for the look-inside tests: attention rows and
next-byte probabilities that are far from uniform, so a wrong index or mask shows."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from python_ref.config import model_config
from python_ref.model import manifest
from python_ref.tinygpt_file import CheckpointState, write_state


def random_model_file(path: Path, preset: str = "tiny", std: float = 0.3, seed: int = 8) -> Path:
    config = model_config(preset)
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in manifest(config):
        if ".ln" in name or name.startswith("ln_f"):
            weights[name] = np.full(shape, 1.0 if name.endswith(".weight") else 0.0, np.float32)
        else:
            weights[name] = (std * rng.standard_normal(shape)).astype(np.float32)
    write_state(path, CheckpointState(config, 0, weights))
    return path
