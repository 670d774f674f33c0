"""site/static/js/model_config.js, the JS levels' one model config, equals python_ref.config for every
preset (a drift between the levels fails here), and configFromHeader rebuilds it from a checkpoint's
header, filling only what the header lacks from presets.json."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT
from python_ref.config import init_std, model_config, preset_names, presets_file, train_config

MODULE = (ROOT / "site/static/js/model_config.js").as_uri()
PRESETS_FILE = json.dumps(str(ROOT / "site/static/presets.json"))


def node(script: str):
    """Runs an ES module snippet with model_config.js imported as `mc` and presets.json as `presets`;
    its printed JSON."""
    prelude = (f"import * as mc from {json.dumps(MODULE)};\n"
               f"import {{ readFileSync }} from 'node:fs';\n"
               f"const presets = JSON.parse(readFileSync("
               f"{json.dumps(str(ROOT / 'site/static/presets.json'))}, 'utf8'));\n")
    r = subprocess.run(["node", "--input-type=module", "-e", prelude + script],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def from_presets():
    return node("console.log(JSON.stringify(Object.fromEntries(Object.keys(presets.presets)"
                ".map((n) => [n, mc.configFromPresets(presets, n)]))));")


@pytest.mark.parametrize("name", preset_names())
def test_config_from_presets_equals_python_ref(from_presets, name):
    got = from_presets[name]
    want = {"model": model_config(name).to_json(), "training": train_config(name).to_json(), "initStd": init_std(),
            "rules": presets_file()["rules"]}
    diff = {k: (got[part].get(k), v)
            for part in ("model", "training") for k, v in want[part].items() if got[part].get(k) != v}
    extra = {part: set(got[part]) - set(want[part]) for part in ("model", "training")}
    print(f"{name}: {len(want['model']) + len(want['training'])} values compared, differences {diff or 'none'}")
    assert got == want, (diff, extra)


def test_config_from_header_rebuilds_the_preset():
    header = {"config": model_config("small").to_json(), "training": train_config("small").to_json(), "preset": "small"}
    got = node(f"console.log(JSON.stringify(mc.configFromHeader({json.dumps(header)}, presets)));")
    assert got == {"model": header["config"], "training": header["training"], "initStd": init_std(),
                   "rules": presets_file()["rules"]}


def test_config_from_header_fills_only_missing_keys():
    """A header that records fewer training keys: presets.json fills those, the recorded ones (batch, lr) stay."""
    header = {"config": {**model_config("tiny").to_json(), "ctx": 24}, "training": {"batch": 5, "lr": 1e-3}}
    got = node(f"console.log(JSON.stringify(mc.configFromHeader({json.dumps(header)}, presets)));")
    training = presets_file()["training"] | {"batch": 5, "lr": 1e-3, "steps": 0}
    print(f"filled training: {got['training']}")
    assert got["model"] == header["config"] and got["training"] == training


def test_config_from_header_without_a_batch_takes_its_presets():
    """Weights alone (no training record) still load: the batch of the header's preset, else of the default."""
    header = {"config": model_config("tiny").to_json(), "preset": "tiny"}
    got = node(f"console.log(JSON.stringify(mc.configFromHeader({json.dumps(header)}, presets)));")
    assert got["training"]["batch"] == train_config("tiny").batch
    del header["preset"]
    got = node(f"console.log(JSON.stringify(mc.configFromHeader({json.dumps(header)}, presets)));")
    assert got["training"]["batch"] == train_config(presets_file()["defaultPreset"]).batch


@pytest.mark.parametrize("training, problem", [
    ({"batch": 0}, "batch must be an integer in [1, 1048576], got 0"),
    ({"gradClip": 0}, "gradClip must be a number > 0 (inf: no clipping), got 0"),
])
def test_config_from_header_refuses_bad_settings(training, problem):
    """A checkpoint's recorded settings meet presets.json's rules before any engine sees them."""
    header = {"config": {"nLayer": 1, "nHead": 1, "dModel": 4, "ctx": 4}, "training": training}
    r = subprocess.run(["node", "--input-type=module", "-e",
                        f"import {{ readFileSync }} from 'node:fs';\n"
                        f"import {{ configFromHeader }} from {json.dumps(MODULE)};\n"
                        f"const presets = JSON.parse(readFileSync({PRESETS_FILE}, 'utf8'));\n"
                        f"configFromHeader({json.dumps(header)}, presets);"],
                       capture_output=True, text=True, timeout=60)
    print(next((line for line in r.stderr.splitlines() if "Error" in line), r.stderr))
    assert r.returncode != 0 and f"the checkpoint's settings are invalid: {problem}" in r.stderr


def test_config_from_presets_refuses_a_bad_override():
    """The WebGPU trainer used to take gradClip 0 (and zero every update): no config with it is made."""
    r = subprocess.run(["node", "--input-type=module", "-e",
                        f"import {{ readFileSync }} from 'node:fs';\n"
                        f"import {{ configFromPresets }} from {json.dumps(MODULE)};\n"
                        f"const presets = JSON.parse(readFileSync({PRESETS_FILE}, 'utf8'));\n"
                        "configFromPresets(presets, 'tiny', {training: {gradClip: 0}});"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "ConfigError: gradClip must be a number > 0 (inf: no clipping), got 0" in r.stderr
