"""The page's pure logic behind issue 58's presentation, in Node: the corpus check names a smaller preset
only where one exists that the corpus can train (corpus_checks.js), the heatmap's cell size stays readable
for a long prompt unless asked to fit (attention_view.js) and its theme colours parse, and a form's field
errors are tied to their fields, the first one focused (form_checks.js, on a minimal stand-in DOM)."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT

JS = ROOT / "site" / "static" / "js"
PRESETS = json.loads((ROOT / "site" / "static" / "presets.json").read_text())["presets"]


def node(script: str):
    """Runs an ES module snippet; its printed JSON."""
    r = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def corpus_problem(n_bytes: int, preset: str) -> str | None:
    ctx = PRESETS[preset]["ctx"]
    shorter = [{"preset": name, "ctx": p["ctx"]} for name, p in PRESETS.items() if p["ctx"] < ctx]
    return node(f"""import {{ corpusProblem }} from {json.dumps((JS / 'corpus_checks.js').as_uri())};
      const bytes = new TextEncoder().encode("abcdefghij".repeat({n_bytes // 10}));
      console.log(JSON.stringify(corpusProblem(bytes, "pasted text",
        {{ ctx: {ctx}, valFraction: 0.1, shorter: {json.dumps(shorter)} }})));""")


@pytest.mark.parametrize("n_bytes,preset,hint", [
    (300, "tiny", None),  # tiny has the shortest context: nothing smaller to suggest
    (500, "small", "or the preset tiny (context 32), which it can train."),
    (300, "small", None),  # too short for tiny as well: suggesting it would send the person nowhere
    (800, "medium", "or one of the presets small (context 64), tiny (context 32), which it can train."),
    (2000, "tiny", "fits"),
])
def test_a_smaller_preset_is_named_only_where_one_can_train_the_corpus(n_bytes, preset, hint):
    message = corpus_problem(n_bytes, preset)
    print(f"\n{n_bytes} bytes, {preset}: {message}")
    if hint == "fits":
        assert message is None
    elif hint is None:
        assert message.endswith(" bytes).") and "preset" not in message.split("Use a longer text")[1]
    else:
        assert message.endswith(hint)


def test_heatmap_cells_stay_readable_unless_asked_to_fit():
    got = node(f"""import {{ cellSize, parseHex, heatColour, READABLE_CELL }} from
        {json.dumps((JS / 'attention_view.js').as_uri())};
      const width = 700;
      console.log(JSON.stringify({{ readable: READABLE_CELL,
        auto: [8, 32, 128, 512].map((T) => cellSize("auto", T, width)),
        fit: [8, 32, 128, 512].map((T) => cellSize("fit", T, width)),
        fixed: cellSize("24", 512, width),
        hex: [parseHex("#1c1c1f"), parseHex("#fff"), parseHex("rgb(1,2,3)")],
        mid: heatColour([255, 255, 255], [29, 78, 216], 0.5) }}));""")
    print(f"\n{got}")
    assert got["auto"] == [24, 20, got["readable"], got["readable"]] and got["readable"] >= 12
    assert got["fit"] == [24, 20, 5, 2]  # what fitting 700 px gives: 5 px cells at 128 bytes, unreadable
    assert got["fixed"] == 24
    assert got["hex"] == [[28, 28, 31], [255, 255, 255], None]
    assert got["mid"] == "rgb(142,167,236)"


def test_field_errors_are_tied_to_their_fields_and_the_first_is_focused():
    got = node(f"""import {{ readFields, reportFieldErrors }} from {json.dumps((JS / 'form_checks.js').as_uri())};
      class Element {{
        constructor(id = "") {{ this.id = id; this.attrs = {{}}; this.children = []; this.textContent = ""; }}
        setAttribute(k, v) {{ this.attrs[k] = String(v); }}
        getAttribute(k) {{ return this.attrs[k] ?? null; }}
        removeAttribute(k) {{ delete this.attrs[k]; }}
        replaceChildren(...c) {{ this.children = c; this.textContent = c.map((x) => x.textContent).join(""); }}
        focus() {{ focused = this.id; }}
      }}
      let focused = null;
      globalThis.document = {{ createElement: () => new Element() }};
      const box = new Element("train-errors"), steps = new Element("steps"), seed = new Element("seed");
      const spec = {{ steps: [steps, "Steps", {{ min: 1, max: 100 }}],
                      seed: [seed, "Seed", {{ min: 0, max: 10, integer: true, optional: true }}] }};
      const show = () => ({{ box: box.textContent, ids: box.children.map((c) => c.id), focused,
        steps: {{ ...steps.attrs }}, seed: {{ ...seed.attrs }} }});
      const out = [];
      steps.value = "abc"; seed.value = "2.5";
      out.push(reportFieldErrors(box, spec, readFields(spec)), show());
      focused = null; steps.value = "5"; seed.value = "";
      const ok = readFields(spec);
      out.push(reportFieldErrors(box, spec, ok), show(), ok.values);
      console.log(JSON.stringify(out));""")
    bad, shown, good, cleared, values = got
    print(f"\n{shown}\n{cleared} {values}")
    assert bad is True and shown["focused"] == "steps"
    assert shown["ids"] == ["train-errors-steps", "train-errors-seed"]
    assert shown["steps"] == {"aria-invalid": "true", "aria-describedby": "train-errors-steps"}
    assert shown["seed"] == {"aria-invalid": "true", "aria-describedby": "train-errors-seed"}
    assert shown["box"] == 'Steps "abc" is not a number. Seed must be a whole number, not 2.5.'
    assert good is False and cleared["focused"] is None and cleared["box"] == ""
    assert cleared["steps"] == {} and cleared["seed"] == {}
    assert values == {"steps": 5, "seed": None}  # an empty optional field: the caller picks (a random sample seed)
