// Prints, as JSON, what the loader's pure decision (chooseBuild) answers for engines lacking each
// feature in turn: tests/wasm/test_wasm_loader.py checks the build and the stated reason of each.
import { chooseBuild } from "../../../site/static/js/wasm_loader.js";

const GiB = 1024 ** 3;
const full = { simd: true, relaxedSimd: true, threads: true, threadsMissing: null, memory64: true, cores: 2 };
const notIsolated = { ...full, threads: false, threadsMissing: "not cross-origin isolated (the page needs COOP/COEP headers)" };
const cases = {
  everything: [full, 0.01 * GiB],
  noRelaxedSimd: [{ ...full, relaxedSimd: false }, 0.01 * GiB],
  notIsolated: [notIsolated, 0.01 * GiB],
  noSimd: [{ ...full, simd: false }, 0.01 * GiB],
  noSimdNoThreads: [{ ...notIsolated, simd: false }, 0.01 * GiB],
  oneCore: [{ ...full, cores: 1 }, 0.01 * GiB],
  bigModel: [full, 6 * GiB],
  bigModelNotIsolated: [notIsolated, 6 * GiB],
  bigModelNoMemory64: [{ ...full, memory64: false }, 6 * GiB],
  tooBig: [full, 20 * GiB],
  preferThreadsNotIsolated: [notIsolated, 0.01 * GiB, "threads"],
  preferScalar: [full, 0.01 * GiB, "scalar"],
  preferThreads: [full, 0.01 * GiB, "threads"],
  preferRelaxedWithout: [{ ...full, relaxedSimd: false }, 0.01 * GiB, "relaxed"],
};
const out = {};
for (const [name, [features, need, prefer]] of Object.entries(cases)) {
  try {
    out[name] = chooseBuild(features, need, prefer ?? null);
  } catch (e) {
    out[name] = { error: e.message };
  }
}
console.log(JSON.stringify(out));
