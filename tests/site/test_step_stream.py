"""site/static/js/step_stream.js in Node, on a stand-in engine whose losses come back a few ms after
each step, as a GPU's do: at most `inFlight` steps queued, losses settled in step order, a burst that
leaves its last steps queued for the next, a drain, two drains at once, a failed step's error, and a
released engine's queued failure that nobody awaits (which must not end the process)."""
from __future__ import annotations

import json
import subprocess

from conftest import ROOT

MODULE = (ROOT / "site/static/js/step_stream.js").as_uri()

SCRIPT = f"""
import {{ StepStream, burst }} from {json.dumps(MODULE)};
// step n's loss is n / 10, known 2 ms after the step; the step named by failAt fails instead
const engine = (failAt = 0) => {{
  const e = {{ step: 0, queuedMost: 0, queued: 0 }};
  e.trainStep = async () => {{
    e.step += 1;
    const n = e.step;
    e.queued += 1;
    e.queuedMost = Math.max(e.queuedMost, e.queued);
    const loss = new Promise((resolve, reject) => setTimeout(() => {{
      e.queued -= 1;
      if (n === failAt) reject(new Error(`step ${{n}} failed`)); else resolve(n / 10);
    }}, 2));
    return {{ loss }};
  }};
  return e;
}};
const out = {{}};
const seen = [];
const e = engine();
const s = new StepStream(e, 4, (step, loss) => seen.push([step, loss]));
let done = 0;
out.burst = await burst(s, 10_000, {{ more: () => done < 10, afterStep: () => {{ done += 1; }} }});
out.afterBurst = {{ settled: seen.map(([step]) => step), queued: s.pending.map((p) => p.step) }};
out.second = await burst(s, 0, {{ more: () => true }});  // ms 0: one step, then back
await s.drain();
out.drained = {{ settled: seen.map(([step]) => step), losses: seen.map(([, loss]) => loss),
  queued: s.pending.length, most: e.queuedMost }};
const one = [];
const w = new StepStream(engine(), 1, (step) => one.push(step));
for (let i = 0; i < 3; i++) {{ await w.step(); one.push(`after ${{i + 1}}`); }}
out.inFlightOne = one;
const f = new StepStream(engine(3), 4, () => {{}});
try {{
  for (let i = 0; i < 6; i++) await f.step();
  await f.drain();
  out.failed = null;
}} catch (err) {{ out.failed = err.message; }}
// two drains at once (the worker's last and a download's): every loss once, in step order
const both = [];
const d = new StepStream(engine(), 8, (step) => both.push(step));
for (let i = 0; i < 6; i++) await d.step();
await Promise.all([d.drain(), d.drain()]);
out.twoDrains = both;
const abandoned = new StepStream(engine(2), 4, () => {{}});
await abandoned.step(); await abandoned.step();  // step 2 will fail with nobody awaiting it
await new Promise((resolve) => setTimeout(resolve, 20));
console.log(JSON.stringify(out));
"""


def test_step_stream():
    r = subprocess.run(["node", "--input-type=module", "-e", SCRIPT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr  # an unhandled rejection would end Node with an error
    out = json.loads(r.stdout)
    print(json.dumps(out))
    assert out["burst"] == 10
    # 10 steps, 4 in flight: steps 1..7 settled as the queue filled, 8..10 left queued for the next burst
    assert out["afterBurst"] == {"settled": list(range(1, 8)), "queued": [8, 9, 10]}
    assert out["second"] == 1
    assert out["drained"]["settled"] == list(range(1, 12)) and out["drained"]["queued"] == 0
    assert out["drained"]["losses"] == [n / 10 for n in range(1, 12)]
    assert out["drained"]["most"] <= 4
    # WebAssembly's 1: each loss settled before the next step
    assert out["inFlightOne"] == [1, "after 1", 2, "after 2", 3, "after 3"]
    assert out["failed"] == "step 3 failed"
    assert out["twoDrains"] == [1, 2, 3, 4, 5, 6]
