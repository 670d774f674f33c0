"""scripts/api_signatures.py: what JS (tinygpt_api.js) and Python (api_ctypes.py) learn of the C
API from its header, above all tg_config's layout and keys, which every caller fills by name."""
import json

import pytest

from conftest import ROOT
from python_ref.config import model_config
from scripts.api_signatures import parse

HEADER = ROOT / "wasm" / "src" / "tinygpt_api.h"


def test_tg_config_layout_and_keys_match_the_model_config():
    config = parse(HEADER.read_text())["structs"]["tg_config"]
    print(json.dumps(config))
    assert [(f["name"], f["type"], f["offset"]) for f in config["fields"]] == [
        ("n_layer", "int32_t", 0), ("n_head", "int32_t", 4), ("d_model", "int32_t", 8), ("ctx", "int32_t", 12),
        ("vocab_size", "int32_t", 16), ("layer_norm_eps", "double", 24), ("init_std", "double", 32)]
    assert config["size"] == 40
    # The callers fill it from the model config plus initStd: a field on either side alone is drift.
    assert {f["key"] for f in config["fields"]} == set(model_config("tiny").to_json()) | {"initStd"}


def test_function_kinds_and_c_types():
    functions = parse(HEADER.read_text())["functions"]
    create = functions["tg_create"]
    assert create["args"] == ["p", "i", "i"] and create["result"] == "p"
    assert create["c_types"] == {"args": ["tg_config*", "int32_t", "int32_t"], "result": "tg_model*"}
    assert functions["tg_last_error"]["c_types"]["result"] == "char*"
    assert functions["tg_set_corpus"]["args"] == ["p", "p", "j", "f"]


def test_struct_fields_are_aligned_and_fixed_size():
    layout = parse("typedef struct s { int32_t a; double b; int32_t c; } s;\nint32_t tg_f(const s* x);")
    print(json.dumps(layout["structs"]))
    assert [f["offset"] for f in layout["structs"]["s"]["fields"]] == [0, 8, 16]
    assert layout["structs"]["s"]["size"] == 24
    with pytest.raises(SystemExit, match="field 'float\\* p'"):
        parse("typedef struct s { float* p; } s;\nint32_t tg_f(const s* x);")
