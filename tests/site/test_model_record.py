"""The page's bookkeeping logic under Node (no browser): the model record's words (model_record.js), the
learning-rate schedule the worker hands the engines (lr_schedule.js, against python_ref's own
RunOptions.lr_multiplier), and the plain words a refused upload gets (file_errors.js)."""
from __future__ import annotations

import json
import subprocess

from conftest import ROOT

from python_ref.train import RunOptions

JS = ROOT / "site/static/js"
PRESETS = json.loads((ROOT / "site/static/presets.json").read_text())


def node(script: str):
    r = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def module(name: str) -> str:
    return json.dumps((JS / name).as_uri())


def test_lr_schedule_is_python_refs_multiplier_step_for_step():
    cases = [("none", 0, 50), ("none", 10, 50), ("cosine", 0, 50), ("cosine", 7, 40), ("cosine", 5, 5),
             ("cosine", 3, 1)]
    got = node(f"""
import {{ lrMultiplier, learningRateAt }} from {module("lr_schedule.js")};
const cases = {json.dumps(cases)};
const out = cases.map(([lrSchedule, warmupSteps, total]) =>
  Array.from({{ length: total + 3 }}, (_, step) => lrMultiplier(step, total, {{ lrSchedule, warmupSteps }})));
out.push([learningRateAt(50, 50, {{ lr: 3e-4, lrSchedule: "cosine", warmupSteps: 0 }})]);
console.log(JSON.stringify(out));""")
    worst = 0.0
    for (schedule, warmup, total), js in zip(cases, got):
        python = [RunOptions(lrSchedule=schedule, warmupSteps=warmup).lr_multiplier(s, total) for s in range(total + 3)]
        worst = max(worst, max(abs(a - b) for a, b in zip(js, python)))
        assert len(js) == len(python)
    print(f"{sum(len(g) for g in got[:-1])} multipliers over {len(cases)} schedules: "
          f"largest difference from python_ref {worst:.1e}")
    assert worst < 1e-15
    # a cosine at its end is 0, which the engines refuse: the smallest positive double stands in
    assert got[-1] == [5e-324]


def test_corpora_grow_by_stretches_and_old_files_get_theirs():
    got = node(f"""
import {{ corporaOf, extendCorpora, corporaWords }} from {module("model_record.js")};
const a = {{ name: "a.txt", bytes: 100, sha256: "a".repeat(64) }};
const b = {{ name: "b.txt", bytes: 200, sha256: "b".repeat(64) }};
let c = corporaOf({{ corpus: a }}, 50);                        // an old file: its corpus from step 0
const old = c.map((x) => ({{ ...x }}));
c = extendCorpora(c, a, 50, 80);                                 // the same corpus goes on: one stretch
const same = c.map((x) => ({{ ...x }}));
c = extendCorpora(c, b, 80, 90);                                 // another corpus: a new stretch
c = extendCorpora(c, b, 90, 90);                                 // no step: nothing
console.log(JSON.stringify({{ old, same, c, none: corporaOf({{}}, 10), fresh: corporaOf({{ corpus: a }}, 0),
  kept: corporaOf({{ corpora: c, corpus: b }}, 90), words: corporaWords(c) }}));""")
    print(got["words"])
    assert got["old"] == [{"name": "a.txt", "bytes": 100, "sha256": "a" * 64, "fromStep": 0, "toStep": 50}]
    assert got["same"][0]["toStep"] == 80 and len(got["same"]) == 1
    assert [(x["name"], x["fromStep"], x["toStep"]) for x in got["c"]] == [("a.txt", 0, 80), ("b.txt", 80, 90)]
    assert got["none"] == [] and got["fresh"] == [] and got["kept"] == got["c"]
    assert got["words"] == "a.txt (steps 1–80), then b.txt (steps 81–90)"


def test_the_words_follow_the_record_as_it_is_now():
    presets = json.dumps(PRESETS)
    got = node(f"""
import {{ continueQuestion, loadedStatus, formFor, describe, presetOfShape }} from {module("model_record.js")};
const presets = {presets};
const hyper = {{ lr: 3e-4, batch: 16, warmupSteps: 0, lrSchedule: "none", weightDecay: 0.1, seed: 5 }};
const r = {{ id: "x", name: "tiny, seed 5", preset: "tiny", shape: {{ nLayer: 2, nHead: 3, dModel: 48, ctx: 32 }},
  backend: "wasm", step: 0, targetSteps: 2000, source: "new", hyper, optimizerState: true, savedStep: null,
  deleted: false }};
r.step = 1762; r.savedStep = 1762;                                   // the step messages moved it on, a save followed
const stopped = continueQuestion(r, {{ steps: 238, newPreset: "small", opfs: true }});
const deleted = continueQuestion({{ ...r, deleted: true }}, {{ steps: 10, newPreset: "small", opfs: true }});
const fp16 = continueQuestion({{ ...r, optimizerState: false, source: "upload" }},
  {{ steps: 10, newPreset: "tiny", opfs: true }});
const finished = loadedStatus({{ ...r, step: 2000, source: "saved" }});
const unfinished = loadedStatus({{ ...r, source: "saved" }});
const form = formFor(r, presets);
const odd = formFor({{ ...r, preset: null, shape: {{ nLayer: 3, nHead: 4, dModel: 64, ctx: 32 }}, step: 40,
  targetSteps: 40 }}, presets);
console.log(JSON.stringify({{ stopped, deleted, fp16, finished, unfinished, form, odd, d: describe(r),
  named: presetOfShape({{ nLayer: 2, nHead: 3, dModel: 48, ctx: 32 }}, presets) }}));""")
    for key in ("stopped", "deleted", "fp16", "finished", "unfinished"):
        print(f"{key}: {got[key]}")
    assert got["stopped"].startswith("tiny, seed 5 at step 1,762 of 2,000 is loaded on WebAssembly.")
    assert "stays in Saved models at step 1,762" in got["stopped"]
    assert "was deleted from Saved models" in got["deleted"] and "stays" not in got["deleted"]
    assert "restarts the optimiser" in got["fp16"] and "float16" in got["fp16"]
    assert got["finished"] == "Loaded tiny at step 2000 (saved checkpoint)." and "Finished" not in got["finished"]
    assert got["unfinished"] == "Loaded tiny at step 1762 of 2,000 (saved checkpoint)."
    assert got["form"] == {"preset": "tiny", "label": got["form"]["label"], "steps": 238, "hyper": got["form"]["hyper"]}
    assert got["odd"]["preset"] is None
    assert got["odd"]["label"] == "the loaded model: 3 layers, 64 wide, 4 heads, context 32"
    assert got["odd"]["steps"] == 40 and got["named"] == "tiny"


def test_a_refused_file_is_said_in_plain_words():
    messages = {
        "not a .tinygpt file: magic is b'Hell', expected b'TGPT'": "not a TinyGPT model file",
        "file is truncated: 0 bytes, shorter than the 12-byte prefix": "cut short",
        "file is truncated: header of 500 bytes runs past the end (40 bytes)": "cut short",
        "unknown .tinygpt version 3; this reader knows version 2": "version 3",
        "state CRC32 mismatch: the weights are corrupt": "state CRC32 mismatch",
        "header CRC32 mismatch: the header is corrupt": "header CRC32 mismatch",
        "manifest/shape mismatch: found tensor b'x' where 'y' belongs": "manifest/shape mismatch",
    }
    got = node(f"""
import {{ plainFileError }} from {module("file_errors.js")};
console.log(JSON.stringify({json.dumps(list(messages))}.map((m) => plainFileError("bad.tinygpt", m))));""")
    for (message, phrase), plain in zip(messages.items(), got):
        print(f"{message!r}\n  -> {plain}")
        assert plain.startswith("bad.tinygpt was not loaded: ") and phrase in plain
        assert "b'" not in plain and 'b"' not in plain


def test_without_web_locks_or_broadcast_channel_the_tab_says_so_and_works_alone():
    got = node(f"""
import {{ tabFeatures, tryLock, lockedIds, modelsChannel }} from {module("model_locks.js")};
const withBoth = tabFeatures();  // Node 20: BroadcastChannel, no navigator.locks
const lock = await tryLock("abc");
const ids = [...await lockedIds()];
const channel = modelsChannel();
channel.post("saved");
delete globalThis.BroadcastChannel;
const neither = tabFeatures();
const quiet = modelsChannel();
quiet.post("saved");
console.log(JSON.stringify({{ withBoth, neither, locked: lock !== null, ids }}));
process.exit(0);""")
    for key in ("locksText", "channelText"):
        print(got["neither"][key])
    assert got["withBoth"]["channel"] is True and got["withBoth"]["locks"] is False
    assert got["neither"] == {
        "locks": False, "channel": False,
        "locksText": "No Web Locks: this tab cannot tell whether another tab is training a saved model; "
                     "keep each model in one tab",
        "channelText": "No BroadcastChannel: saved models made in other tabs appear here only after a reload"}
    assert got["locked"] is True and got["ids"] == []  # alone, every lock is this tab's
