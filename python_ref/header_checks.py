"""What a .tinygpt header may say, beyond the keys a reader needs to find the weights: every value that a
reader, the trainer, the sampler or the page uses is checked here, with its key named, so that a file whose
CRCs are right but whose header lies is refused in one sentence instead of failing deep inside a run.

site/static/js/header_checks.js applies the same checks in the same order with the same words
(tests/site/test_header_fuzz.py feeds both every JSON type in place of every value); docs/format.md lists
the rules. The config rules themselves come from presets.json (config.py's check_fields).

JSON numbers are read as the browser reads them (json_number): one kind of number, integral values below
1e16 as integers, anything else as a float (inf beyond the float range), so both readers see the same
value and print it the same way.
"""
from __future__ import annotations

import math
import re

from .config import ConfigError, check_fields, presets_file, show

# Deeper nesting than this anywhere in a header is refused: no key the format defines nests past 4, and a
# recursive parser (Python's) gives up near 1,000 while JSON.parse does not.
MAX_HEADER_DEPTH = 32
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
RUN_OPTIONS = {"worldSize": ("integer", 1), "rankBatch": ("integer", 1), "gradAccum": ("integer", 1),
               "warmupSteps": ("integer", 0), "cleanSteps": ("integer", 0)}
LR_SCHEDULES = ("none", "cosine")
PRECISIONS = ("fp32", "bf16", "fp16")
FLAGS = ("bf16", "compile", "fsdp")


class HeaderError(ValueError):
    """One header value that cannot be trusted; tinygpt_file turns it into a TinyGPTFileError."""


def json_number(text: str):
    """A JSON number as JSON.parse reads it: integral and below 1e16 in magnitude → int, else float."""
    x = float(text)
    return int(x) if math.isfinite(x) and x.is_integer() and abs(x) < 1e16 else x


def too_deep(value) -> bool:
    """Whether `value` nests objects or arrays more than MAX_HEADER_DEPTH levels (iteratively)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_HEADER_DEPTH:
                return True
            stack += [(x, depth + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return False


def depth_message() -> str:
    return f"header JSON nests deeper than {MAX_HEADER_DEPTH} levels"


def kind(v) -> str:
    """A JSON value's kind in the words of the messages (the same at both readers)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "an array" if isinstance(v, list) else "an object"


def _key(key: str, expected: str, got) -> HeaderError:
    """'header key K must be E, got KIND[: VALUE]' (a scalar's value is shown, an array's or object's not)."""
    value = "" if isinstance(got, (dict, list)) else f": {show(got)}"
    return HeaderError(f"header key {key!r} must be {expected}, got {kind(got)}{value}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def check_training(training) -> None:
    """`training`: the recipe (presets.json's training rules) and the run's options (README, torchrun)."""
    if not isinstance(training, dict):
        raise _key("training", "an object", training)
    recipe = {k: v for k, v in training.items() if k in presets_file()["rules"]["training"]}
    try:
        check_fields("training", recipe)
    except ConfigError as e:
        raise HeaderError(f"header key 'training': {e}") from None
    for name, (_, low) in RUN_OPTIONS.items():
        if name in training and not (_is_int(training[name]) and training[name] >= low):
            raise HeaderError(f"header key 'training': {name} must be an integer >= {low}, got {show(training[name])}")
    if "precision" in training and training["precision"] not in PRECISIONS:
        raise HeaderError(f"header key 'training': precision must be one of {', '.join(PRECISIONS)}, "
                          f"got {show(training['precision'])}")
    if "lossScale" in training and not (_is_number(training["lossScale"]) and training["lossScale"] > 0):
        raise HeaderError(f"header key 'training': lossScale must be a finite number > 0, "
                          f"got {show(training['lossScale'])}")
    if "lrSchedule" in training and training["lrSchedule"] not in LR_SCHEDULES:
        raise HeaderError(f"header key 'training': lrSchedule must be one of {', '.join(LR_SCHEDULES)}, "
                          f"got {show(training['lrSchedule'])}")
    for name in FLAGS:
        if name in training and not isinstance(training[name], bool):
            raise HeaderError(f"header key 'training': {name} must be true or false, got {show(training[name])}")


def check_corpus(corpus, key: str = "corpus") -> None:
    """`corpus`: {name, bytes, sha256} of a training text."""
    if not isinstance(corpus, dict):
        raise _key(key, "an object {name, bytes, sha256}", corpus)
    if not isinstance(corpus.get("name"), str):
        raise HeaderError(f"header key {key!r}: name must be a string, got {show(corpus.get('name'))}")
    if not (_is_int(corpus.get("bytes")) and 0 <= corpus["bytes"] < 2**53):
        raise HeaderError(f"header key {key!r}: bytes must be an integer in [0, 2^53), got {show(corpus.get('bytes'))}")
    if not (isinstance(corpus.get("sha256"), str) and SHA256_HEX.fullmatch(corpus["sha256"])):
        raise HeaderError(f"header key {key!r}: sha256 must be 64 lowercase hex digits, "
                          f"got {show(corpus.get('sha256'))}")
    for bound in ("fromStep", "toStep"):  # the steps trained on it (the page's corpora list)
        if bound in corpus and not (_is_int(corpus[bound]) and 0 <= corpus[bound] < 2**31):
            raise HeaderError(f"header key {key!r}: {bound} must be an integer in [0, 2^31), got {show(corpus[bound])}")


def check_history(history, key: str) -> None:
    """lossHistory / valHistory: [[step, loss], ...] with integer steps >= 0 and finite losses."""
    if not isinstance(history, list):
        raise _key(key, "an array of [step, loss] pairs", history)
    for i, entry in enumerate(history):
        if not (isinstance(entry, list) and len(entry) == 2 and _is_int(entry[0]) and 0 <= entry[0] < 2**31
                and _is_number(entry[1])):
            raise HeaderError(f"header key {key!r}: entry {i} must be [step, loss] (an integer in [0, 2^31) and a "
                              f"finite number), got {show(entry)}")


def check_values(header: dict) -> None:
    """Every optional key the levels read, where present (the required ones are the reader's own)."""
    if "training" in header:
        check_training(header["training"])
    if "corpus" in header:
        check_corpus(header["corpus"])
    if "corpora" in header:
        if not isinstance(header["corpora"], list):
            raise _key("corpora", "an array of {name, bytes, sha256}", header["corpora"])
        for i, c in enumerate(header["corpora"]):
            check_corpus(c, f"corpora[{i}]")
    for key in ("lossHistory", "valHistory"):
        if key in header:
            check_history(header[key], key)
    for key in ("finalLoss", "bestVal"):
        if key in header and header[key] is not None and not _is_number(header[key]):
            raise _key(key, "a finite number or null", header[key])
    for key in ("preset", "sample", "savedAt", "name"):
        if key in header and header[key] is not None and not isinstance(header[key], str):
            raise _key(key, "a string or null", header[key])
    if "run" in header:
        run = header["run"]
        if not isinstance(run, dict):
            raise _key("run", "an object {id, backend, engine}", run)
        for field in ("id", "backend", "engine"):
            if field in run and run[field] is not None and not isinstance(run[field], str):
                raise HeaderError(f"header key 'run': {field} must be a string or null, got {show(run[field])}")


def check_preset(header: dict, config) -> None:
    """A `preset` that names one of presets.json's must describe these weights (its shape is the config's)."""
    name = header.get("preset")
    preset = presets_file()["presets"].get(name) if isinstance(name, str) else None
    if preset is None:
        return  # no preset, or a name this version does not know (a model of its own shape)
    for field in ("nLayer", "nHead", "dModel", "ctx"):
        if preset[field] != getattr(config, field):
            raise HeaderError(f"header key 'preset' says {name!r}, but the weights are not a {name} model "
                              f"({field} {getattr(config, field)}, the preset has {preset[field]})")
