"""python_ref/config.py: presets.json is the one source of truth, and bad configs are refused."""
import math
import re

import pytest
import torch

from python_ref.config import (
    ConfigError, ModelConfig, model_config, preset_names, presets_file, train_config,
)
from python_ref.model import TinyGPT, manifest



def formula(c: ModelConfig) -> int:
    C, L = c.dModel, c.nLayer
    return 256 * C + c.ctx * C + 2 * C + L * (12 * C * C + 13 * C)


def test_nine_presets_exist():
    assert preset_names() == ["tiny", "small", "medium", "large", "xl", "huge", "massive", "mega", "behemoth"]
    assert presets_file()["defaultPreset"] == "small"


@pytest.mark.parametrize("preset", preset_names())
def test_parameter_count_formula_manifest_and_model_agree(preset):
    c = model_config(preset)
    from_manifest = sum(math.prod(shape) for _, shape in manifest(c))
    assert c.param_count() == formula(c) == from_manifest
    # Built on the meta device: real modules with shapes but no storage (behemoth would need 1.9 GB).
    with torch.device("meta"):
        assert TinyGPT(c, seed=None).num_params() == formula(c)
    print(f"{preset}: {formula(c):,} parameters")


def test_behemoth_count():
    assert model_config("behemoth").param_count() == 473_244_160


def test_dmodel_not_divisible_by_heads_names_the_problem():
    with pytest.raises(ConfigError, match=r"dModel \(50\) is not divisible by nHead \(3\)"):
        ModelConfig(nLayer=1, nHead=3, dModel=50, ctx=8)


@pytest.mark.parametrize("field", ["nLayer", "nHead", "dModel", "ctx", "vocabSize"])
@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4", None, 2**20 + 1])
def test_non_positive_or_non_integer_dims_refused(field, bad):
    good = dict(nLayer=1, nHead=2, dModel=8, ctx=4, vocabSize=256)
    with pytest.raises(ConfigError, match=rf"{field} must be an integer in \[1, \d+\], got {re.escape(repr(bad))}"):
        ModelConfig(**dict(good, **{field: bad}))


def test_defaults_come_from_presets_json():
    """vocabSize and layerNormEps left out are presets.json's model values, not numbers of config.py's."""
    c = ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=4)
    defaults = presets_file()["model"]
    assert (c.vocabSize, c.layerNormEps) == (defaults["vocabSize"], defaults["layerNormEps"])
    assert ModelConfig.from_json({"nLayer": 1, "nHead": 2, "dModel": 8, "ctx": 4}) == c


@pytest.mark.parametrize("eps", [0, -1e-5, float("nan"), float("inf"), True, "1e-5"])
def test_bad_layernorm_eps_refused(eps):
    with pytest.raises(ConfigError, match="layerNormEps"):
        ModelConfig(nLayer=1, nHead=2, dModel=8, ctx=4, layerNormEps=eps)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ConfigError, match=r"unknown preset 'gigantic'; choose one of tiny, small"):
        model_config("gigantic")
    with pytest.raises(ConfigError, match="unknown preset"):
        train_config("gigantic")


def test_from_json_round_trip_and_missing_keys():
    c = model_config("small")
    assert ModelConfig.from_json(c.to_json()) == c
    with pytest.raises(ConfigError, match="lacks nHead, ctx"):
        ModelConfig.from_json({"nLayer": 1, "dModel": 8})
    with pytest.raises(ConfigError, match="must be an object"):
        ModelConfig.from_json([1, 2])


def test_train_config_defaults_come_from_presets_json():
    t = train_config("tiny")
    f = presets_file()
    assert (t.batch, t.steps) == (f["presets"]["tiny"]["batch"], f["presets"]["tiny"]["steps"])
    assert (t.lr, t.beta1, t.beta2, t.eps, t.weightDecay, t.gradClip) == (3e-4, 0.9, 0.95, 1e-8, 0.1, 1.0)
    assert train_config("tiny", lr=1e-3, steps=None).lr == 1e-3


@pytest.mark.parametrize("override, problem", [
    (dict(lr=0), "lr"), (dict(lr=float("nan")), "lr"), (dict(batch=0), "batch"), (dict(steps=-1), "steps"),
    (dict(valFraction=1.0), "valFraction"), (dict(seed=2**53), "seed"), (dict(seed=1.5), "seed"),
    (dict(beta2=1.0), "beta2"), (dict(eps=0), "eps"), (dict(evalWindows=0), "evalWindows"),
    (dict(gradClip=0), r"gradClip must be a number > 0 \(inf: no clipping\), got 0"), (dict(gradClip=-1.0), "gradClip"),
])
def test_bad_training_values_refused(override, problem):
    with pytest.raises(ConfigError, match=problem):
        train_config("tiny", **override)


def test_grad_clip_inf_means_no_clipping():
    assert train_config("tiny", gradClip=float("inf")).gradClip == float("inf")
