"""One set of rules for every config field (site/static/presets.json "rules"), read by all three
levels: python_ref/config.py, webgpu/config_rules.js (the page's forms, model_config.js, the .tinygpt
reader, the WebAssembly engine, the WebGPU trainer) and the C++ core (through the header
scripts/config_rules_header.py generates at build time). The same bad values go to each level and must get
the same decision and the same sentence naming the field; a level that reads a rule differently (a
stale or hand-written bound) fails here.

The cases come from the rules themselves (each bound from both sides, nan, inf, a fraction for an
integer, values of the wrong type) plus the decisions this file pins: gradClip 0 is refused (it would
zero every update), gradClip inf means no clipping. A level that cannot be handed a value (a string
to C++, an int32 field given 2.5, steps and evalEvery which the C++ core never sees) prints "n/a"."""
from __future__ import annotations

import ctypes as C
import json
import math
import re
import subprocess

import numpy as np
import pytest

from conftest import ROOT
from python_ref.config import (
    DEFAULT_CORPUS, ConfigError, ModelConfig, TrainConfig, check_fields, init_std, model_config, rules, show,
    train_config,
)
from python_ref.sample import check_sampling_args
from scripts.config_rules_header import header
from support import tinygpt_native as native

PRESET = "tiny"
NA = "n/a"
INT32 = 2**31
SAMPLING_BASE = {"temperature": 0.8, "topK": 40, "maxNewTokens": 1, "seed": 0}


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return is_int(v) or isinstance(v, float)


def cases_of(section: str, name: str, rule: dict) -> list:
    """Values around each bound of the rule, and values no rule of its type accepts."""
    integer = rule["type"] == "integer"
    step = 1 if integer else 0.5
    values = []
    if "min" in rule:
        values += [rule["min"], rule["min"] - step]
    if "above" in rule:
        values += [rule["above"], rule["above"] + (0.25 if "below" in rule else step)]
    if "max" in rule:
        values += [rule["max"], rule["max"] + step]
    if "below" in rule:
        values += [rule["below"] - step if integer else rule["below"] - 0.25, rule["below"]]
    values += [1.5 if integer else 0.5, float("nan"), float("inf"), -float("inf"), "1", None, True]
    if not integer and "max" not in rule and "below" not in rule:
        values += [1e-05, 1e+20]
    unique = {(type(v).__name__, repr(v)): v for v in values}  # True is not 1, nor 1.0 1
    return [(section, name, v) for v in unique.values()]


def all_cases() -> list:
    r = rules()
    cases = [c for section in ("model", "training", "sampling") for name, rule in r[section].items()
             for c in cases_of(section, name, rule)]
    # checks across fields: the tiny preset's nHead (3) does not divide 50
    cases += [("model", "dModel", 50), ("model", "nHead", 5)]
    return cases


CASES = all_cases()


# ---------------------------------------------------------------- python_ref

def python_says(section, name, value):
    try:
        if section == "model" and name == "initStd":
            check_fields("model", {"initStd": value})  # what init_std() checks presets.json's value with
        elif section == "model":
            ModelConfig(**(model_config(PRESET).to_json() | {name: value}))
        elif section == "training":
            TrainConfig(**(train_config(PRESET).to_json() | {name: value}))
        else:
            s = SAMPLING_BASE | {name: value}
            check_sampling_args(b"\n", s["maxNewTokens"], s["temperature"], s["topK"], s["seed"])
    except ConfigError as e:
        return "refuse", str(e)
    return "accept", None


# ---------------------------------------------------------------- the C++ core (libtinygpt.so)

C_MODEL_INT32 = {"nLayer", "nHead", "dModel", "ctx", "vocabSize"}


@pytest.fixture(scope="module")
def core():
    """A tiny model with weights and a corpus, for the calls that take training and sampling values."""
    b = native.binding()
    lib = b.lib
    m = native.NativeModel(model_config(PRESET), train_config(PRESET).batch)
    m.init(0)
    m.set_corpus(DEFAULT_CORPUS.read_bytes()[:20_000], 0.1)
    yield b, lib, m
    m.close()


def core_says(core, section, name, value):
    b, lib, m = core
    if not is_number(value) or isinstance(value, bool):
        return NA
    model, training = model_config(PRESET).to_json() | {"initStd": init_std()}, train_config(PRESET).to_json()

    def result(rc):
        return ("refuse", lib.tg_last_error().decode()) if rc < 0 else ("accept", None)

    int32 = is_int(value) and -INT32 <= value < INT32
    if section == "model" or name == "batch":
        if (name in C_MODEL_INT32 or name == "batch") and not int32:
            return NA
        cfg = b.struct("tg_config", model | ({name: value} if section == "model" else {}))
        return result(lib.tg_arena_bytes_for(C.byref(cfg), value if name == "batch" else training["batch"]))
    if section == "training":
        if name in ("lr", "beta1", "beta2", "eps", "weightDecay", "gradClip"):
            h = training | {name: value}
            rc = lib.tg_set_hyper(m.h, h["lr"], h["beta1"], h["beta2"], h["eps"], h["weightDecay"], h["gradClip"])
            return result(rc)
        if name == "valFraction":
            corpus = np.frombuffer(DEFAULT_CORPUS.read_bytes()[:20_000], np.uint8)
            rc = lib.tg_set_corpus(m.h, corpus.ctypes.data_as(C.c_void_p), corpus.size, value)
            lib.tg_set_corpus(m.h, corpus.ctypes.data_as(C.c_void_p), corpus.size, 0.1)
            return result(rc)
        if name == "evalWindows":
            return result(lib.tg_eval(m.h, value)) if int32 else NA
        if name == "seed":
            return result(lib.tg_init(m.h, value)) if is_int(value) and 0 <= value < 2**64 else NA
        return NA  # steps, evalEvery: the caller's loop, not the core's
    s = SAMPLING_BASE | {name: value}
    if not (is_int(s["topK"]) and -INT32 <= s["topK"] < INT32 and is_int(s["maxNewTokens"])
            and -INT32 <= s["maxNewTokens"] < INT32 and is_int(s["seed"]) and 0 <= s["seed"] < 2**64):
        return NA
    prompt, out = np.array([10], np.int32), np.empty(4, np.int32)
    s["maxNewTokens"] = min(s["maxNewTokens"], 4)  # more tokens are accepted alike: no need to make them
    rc = lib.tg_generate(m.h, prompt.ctypes.data_as(C.c_void_p), 1, s["maxNewTokens"], s["temperature"],
                         s["topK"], s["seed"], 1, out.ctypes.data_as(C.c_void_p))
    return result(rc)


# ---------------------------------------------------------------- JS (Node)

JS = """
import { readFileSync } from "node:fs";
import { checkConfig, checkFields } from %(rules)s;
import { configFromPresets } from %(model_config)s;
const presets = JSON.parse(readFileSync(%(presets)s, "utf8"));
const special = { nan: NaN, inf: Infinity, "-inf": -Infinity };
const decode = (v) => (v && typeof v === "object" && "$" in v ? special[v.$] : v);
let trainer = null;
try { ({ Trainer: trainer } = await import(%(trainer)s)); } catch (e) { trainer = String(e); }
const base = configFromPresets(presets, %(preset)s);
const outcome = (fn) => {
  try {
    fn();
    return ["accept", null];
  } catch (e) {
    return e.name === "ConfigError" ? ["refuse", e.message] : ["error", String(e)];
  }
};
const out = [];
for (const [section, name, raw] of JSON.parse(readFileSync(0, "utf8"))) {
  const value = decode(raw), config = { ...base, model: { ...base.model }, training: { ...base.training } };
  if (section === "model" && name === "initStd") config.initStd = value;
  else if (section !== "sampling") config[section][name] = value;
  const js = section === "sampling"
    ? outcome(() => checkFields(presets.rules, "sampling", { ...%(sampling)s, [name]: value }))
    : outcome(() => checkConfig(config));
  // the WebGPU trainer's own check (Trainer.requirements runs it before sizing any buffer)
  let webgpu = "n/a";
  if (section !== "sampling" && typeof trainer === "function") {
    webgpu = outcome(() => {
      try { trainer.requirements(config); } catch (e) { if (e.name === "ConfigError") throw e; }
    });
  }
  out.push({ js, webgpu });
}
console.log(JSON.stringify({ out, trainer: typeof trainer === "function" ? null : trainer }));
"""


def encode(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return {"$": show(v)}
    return v


@pytest.fixture(scope="module")
def js_results():
    script = JS % {
        "rules": json.dumps((ROOT / "webgpu/config_rules.js").as_uri()),
        "model_config": json.dumps((ROOT / "site/static/js/model_config.js").as_uri()),
        "trainer": json.dumps((ROOT / "webgpu/trainer.js").as_uri()),
        "presets": json.dumps(str(ROOT / "site/static/presets.json")),
        "preset": json.dumps(PRESET),
        "sampling": json.dumps(SAMPLING_BASE),
    }
    r = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=120,
                       input=json.dumps([[s, n, encode(v)] for s, n, v in CASES]))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    if got["trainer"]:
        print(f"webgpu/trainer.js could not be imported under Node: {got['trainer']}")
    return [(tuple(o["js"]), o["webgpu"] if o["webgpu"] == NA else tuple(o["webgpu"])) for o in got["out"]]


def fmt(r) -> str:
    return r if r == NA else "accepts" if r[0] == "accept" else f"refuses: {r[1]}"


def test_every_level_refuses_the_same_values_in_the_same_words(core, js_results):
    disagreements, counted = [], {"python": 0, "C++": 0, "JS": 0, "WebGPU": 0}
    for (section, name, value), (js, webgpu) in zip(CASES, js_results):
        said = {"python": python_says(section, name, value), "C++": core_says(core, section, name, value),
                "JS": js, "WebGPU": webgpu}
        print(f"{section}.{name} = {show(value)}")
        for level, r in said.items():
            print(f"    {level:7} {fmt(r)}")
            counted[level] += r != NA
        answers = {r for r in said.values() if r != NA}
        if len(answers) != 1 or any(r[0] == "error" for r in answers):
            disagreements.append((f"{section}.{name} = {show(value)}", said))
    print(f"{len(CASES)} cases; answered by python {counted['python']}, C++ {counted['C++']}, JS {counted['JS']}, "
          f"WebGPU trainer {counted['WebGPU']}; disagreements: {len(disagreements)}")
    assert not disagreements, "\n".join(f"{case}: {said}" for case, said in disagreements)


def test_grad_clip_zero_is_refused_and_inf_means_no_clipping(core, js_results):
    """torch's clip_grad_norm_ with max_norm 0 scales every gradient to zero: no level may take it."""
    for value, want in ((0, "refuse"), (0.0, "refuse"), (float("inf"), "accept"), (1e-3, "accept")):
        assert python_says("training", "gradClip", value)[0] == want
        assert core_says(core, "training", "gradClip", value)[0] == want
    at = {show(v): i for i, (s, n, v) in enumerate(CASES) if (s, n) == ("training", "gradClip")}
    assert js_results[at["0"]][0][0] == "refuse" and js_results[at["inf"]][0][0] == "accept"
    print(f"gradClip 0: {python_says('training', 'gradClip', 0)[1]}; gradClip inf: accepted at every level")


def test_the_generated_header_is_the_rules_of_presets_json():
    """The library the tests load was compiled against presets.json as it is now."""
    native.ensure_built()
    built = (native.NATIVE / "include" / "config_rules_generated.h").read_text()
    assert built == header(json.loads((ROOT / "site/static/presets.json").read_text()))


def test_page_fields_stay_inside_the_levels_rules():
    """A page field narrows the rule of the field it feeds (steps, temperature, maxNewTokens, and the training form's
    lr, batch and weightDecay), never widens it."""
    r = rules()
    feeds = {"steps": ("training", "steps"), "temperature": ("sampling", "temperature"),
             "maxNewTokens": ("sampling", "maxNewTokens"), "lr": ("training", "lr"), "batch": ("training", "batch"),
             "weightDecay": ("training", "weightDecay")}
    for name, rule in r["page"].items():
        if name not in feeds:
            continue
        level = r[feeds[name][0]][feeds[name][1]]
        for bound in (rule.get("min"), rule.get("max")):
            if bound is not None:
                assert check_fields(feeds[name][0], {feeds[name][1]: bound}) is None, (name, bound, level)
        print(f"page {name} {rule} within {'.'.join(feeds[name])} {level}")


MANIFEST_DEFINITIONS = {
    # a definition lists the last block tensor with its shape; a user only looks tensors up by name
    "Python": (["python_ref", "bench", "server", "scripts"], "*.py", r"""["']mlp\.fc_out\.bias["'],\s*\(C,\)"""),
    "JS": (["webgpu", "site/static/js", "bench"], "*.js", r"""["`']mlp\.fc_out\.bias["`'],\s*\[C\]"""),
    "C++": (["wasm/src", "bench"], "*.cpp", r"""["']mlp\.fc_out\.bias["'],\s*C,\s*1"""),
}


@pytest.mark.parametrize("language", MANIFEST_DEFINITIONS)
def test_one_manifest_per_language(language):
    folders, pattern, definition = MANIFEST_DEFINITIONS[language]
    found = sorted(str(p.relative_to(ROOT)) for folder in folders for p in (ROOT / folder).rglob(pattern)
                   if "node_modules" not in p.parts and re.search(definition, p.read_text(errors="replace")))
    print(f"{language}: the manifest is defined in {found}")
    assert len(found) == 1, found
