// Picks and loads one of the WebAssembly builds of the C++ core: relaxed (threads + relaxed SIMD),
// threads, simd, scalar (any engine) and memory64 (only for a model too big for 4 GiB). Their names,
// memory limits and the features each needs come from wasm/builds.json, the list the build compiles
// (as ../wasm/builds.js, which build_wasm.sh writes beside the builds).
// The choice is the fastest build that this engine can run AND that can hold the model, and it
// always comes with a sentence saying why, which the page shows: a fallback is never silent.
import BUILD_LIST from "../wasm/builds.js";
import { wrapTinyGPT } from "./wasm_api.js";

const GiB = 1024 ** 3;
const BUILDS = Object.fromEntries(BUILD_LIST.builds.map((b) => [b.name, b]));
// What each build can address (their -sMAXIMUM_MEMORY) ...
export const BUILD_MEMORY_LIMIT = Object.fromEntries(BUILD_LIST.builds.map((b) => [b.name, b.memoryGiB * GiB]));
// ... less what lives beside the model's arena: static data, the 1 MB stacks of the main thread
// and of every pool thread, and malloc's own overhead.
export const RUNTIME_OVERHEAD_BYTES = 64 * 1024 * 1024;

const isNode = typeof process !== "undefined" && !!process.versions?.node;
export const SECURE_CONTEXT_NEEDED = "not a secure context (open the page over https, or as http://localhost)";

// Tiny modules that only validate where the feature exists (as in wasm-feature-detect).
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10,
  1, 8, 0, 65, 0, 253, 15, 253, 98, 11]);                     // (func (result v128) i8x16.popcnt(splat 0))
const THREADS_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 5, 4, 1,
  3, 1, 1, 10, 11, 1, 9, 0, 65, 0, 254, 16, 2, 0, 26, 11]);    // shared memory + i32.atomic.load
const RELAXED_SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0,
  10, 19, 1, 17, 0, 65, 0, 253, 15, 65, 0, 253, 15, 65, 0, 253, 15, 253, 133, 2, 11]);  // f32x4.relaxed_madd of 3 splats
const MEMORY64_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 5, 3, 1, 4, 1]);  // (memory i64 1)

const validates = (bytes) => {
  try { return WebAssembly.validate(bytes); } catch { return false; }
};

// What this engine offers. Each field is a boolean plus, for threads, the reason it is missing.
export async function detectFeatures() {
  const simd = validates(SIMD_PROBE);
  const relaxedSimd = simd && validates(RELAXED_SIMD_PROBE);
  const sharedMemory = typeof SharedArrayBuffer === "function" && validates(THREADS_PROBE);
  // A page can only share memory with workers when cross-origin isolated (COOP + COEP headers).
  // Node has no such notion: SharedArrayBuffer and worker_threads are always there.
  const isolated = isNode ? true : globalThis.crossOriginIsolated === true;
  let threadsMissing = null;
  // An insecure context (http on a name other than localhost) is never isolated, whatever the headers.
  if (!isolated && globalThis.isSecureContext === false) threadsMissing = SECURE_CONTEXT_NEEDED;
  else if (!isolated) threadsMissing = "not cross-origin isolated (the page needs COOP/COEP headers)";
  else if (!sharedMemory) threadsMissing = "no SharedArrayBuffer / WebAssembly threads in this engine";
  // Node 20 validates a 64-bit memory behind a flag only, and the Memory64 build is web-only.
  const memory64 = !isNode && validates(MEMORY64_PROBE);
  const cores = isNode
    ? (await import("node:os")).cpus().length
    : Math.max(1, globalThis.navigator?.hardwareConcurrency || 1);
  return { simd, relaxedSimd, threads: threadsMissing === null, threadsMissing, memory64, cores, isNode };
}

const fmtGiB = (bytes) => `${(bytes / GiB).toFixed(bytes < GiB ? 3 : 2)} GiB`;
const fits = (build, needBytes) => needBytes + RUNTIME_OVERHEAD_BYTES <= BUILD_MEMORY_LIMIT[build];

// Why this engine cannot run a build with these needs, or null. The most basic missing feature is
// named first (a build that needs relaxed SIMD also needs SIMD).
const FEATURE_CHECKS = [
  ["memory64", (f) => (f.memory64 ? null : "this engine has no WebAssembly Memory64")],
  ["simd", (f) => (f.simd ? null : "this engine has no WebAssembly SIMD")],
  ["relaxedSimd", (f) => (f.relaxedSimd ? null : "this engine has no WebAssembly relaxed SIMD")],
  ["threads", (f) => f.threadsMissing],
];
const missingFeature = (needs, features) =>
  FEATURE_CHECKS.map(([need, check]) => (needs[need] ? check(features) : null)).find((why) => why) ?? null;

// Pure decision (testable without any engine): { build, reason } or throws an Error whose message
// says why no build can run the model. prefer: a build the user asked for explicitly.
export function chooseBuild(features, needBytes, prefer = null) {
  const need = `model needs ${fmtGiB(needBytes)}`;
  if (prefer) {
    if (!BUILDS[prefer]) throw new Error(`unknown build '${prefer}'`);
    const missing = missingFeature(BUILDS[prefer].needs, features);
    if (missing) throw new Error(`the ${prefer} build was requested but ${missing}`);
    if (!fits(prefer, needBytes)) {
      throw new Error(`the ${prefer} build was requested but the ${need}, more than its ${fmtGiB(BUILD_MEMORY_LIMIT[prefer])}`);
    }
    return { build: prefer, reason: `${prefer} build requested` };
  }
  if (!fits("threads", needBytes)) {
    // Only a 64-bit build can hold it.
    const why = `${need}, more than the ${BUILD_MEMORY_LIMIT.threads / GiB} GiB a 32-bit WebAssembly build can address`;
    if (!fits("memory64", needBytes)) throw new Error(`${need}, more than the ${BUILD_MEMORY_LIMIT.memory64 / GiB} GiB of the Memory64 build`);
    if (!features.memory64) throw new Error(`${why}, and this engine has no WebAssembly Memory64`);
    if (!features.simd) throw new Error(`${why}, and this engine has no WebAssembly SIMD (the Memory64 build needs it)`);
    if (!features.threads) throw new Error(`${why}, and the Memory64 build needs threads: ${features.threadsMissing}`);
    return { build: "memory64", reason: `${why}: Memory64 build (SIMD + ${features.cores}-thread pool)` };
  }
  if (!features.simd) {
    return { build: "scalar", reason: "no WebAssembly SIMD in this engine: scalar single-threaded build (slowest)" };
  }
  if (!features.threads) {
    return { build: "simd", reason: `${features.threadsMissing}: single-threaded SIMD build` };
  }
  if (features.cores < 2) {
    return { build: "simd", reason: "only one CPU core reported: single-threaded SIMD build" };
  }
  const shared = features.isNode ? "Node (shared memory always available)" : "cross-origin isolated";
  if (features.relaxedSimd) {
    return { build: "relaxed", reason: `${shared}, ${features.cores} cores, relaxed SIMD: SIMD + fused multiply-add + ${features.cores}-thread build` };
  }
  return { build: "threads", reason: `${shared}, ${features.cores} cores, no WebAssembly relaxed SIMD (fused multiply-add) in this engine: SIMD + ${features.cores}-thread build` };
}

const defaultBaseUrl = () => new URL("../wasm/", import.meta.url);

// Instantiates one build. threads = pool size for the threads/memory64 builds (ignored otherwise).
export async function instantiateBuild(build, { baseUrl = defaultBaseUrl(), threads = 1 } = {}) {
  const dir = new URL(`${build}/`, baseUrl);
  const [{ default: createModule }, { default: signatures }] = await Promise.all([
    import(new URL("tinygpt.mjs", dir).href),
    import(new URL("tinygpt_api.js", dir).href),
  ]);
  const module = await createModule({ tgThreads: Math.max(1, threads) });
  return wrapTinyGPT(module, signatures, { memory64: build === "memory64" });
}

// Bytes the model needs inside WebAssembly memory: its arena (exact, from the C API, which is the
// only place that knows the layout) plus the corpus copy. Asked of the scalar build, which every
// engine runs and which starts no threads; it is instantiated once and kept.
let sizer = null;
export async function memoryNeedBytes(config, corpusBytes = 0, { baseUrl = defaultBaseUrl() } = {}) {
  sizer ??= instantiateBuild("scalar", { baseUrl });
  const tg = await sizer;
  const arena = tg.withStruct("tg_config", config, (ptr) => tg.api.tg_arena_bytes_for(ptr, config.batch));
  if (arena < 0) throw new Error(`invalid model config: ${tg.string(tg.api.tg_last_error())}`);
  return arena + corpusBytes;
}

// The whole decision + load. config: the model's config with initStd (tg_config's fields, by their
// presets.json keys) and batch.
// Returns { build, reason, threads, needBytes, features, tg } where tg is the wrapped module.
// instances: an optional Map that keeps instantiated builds for the next call (a page that trains
// one model after another reuses a module and its threads instead of starting new ones each time).
export async function loadTinyGPT(config, { corpusBytes = 0, prefer = null, threads = null, baseUrl = defaultBaseUrl(),
  instances = null } = {}) {
  const features = await detectFeatures();
  const needBytes = await memoryNeedBytes(config, corpusBytes, { baseUrl });
  const { build, reason } = chooseBuild(features, needBytes, prefer);
  const threaded = BUILDS[build].needs.threads;
  const nThreads = threaded ? Math.max(1, threads ?? features.cores) : 1;
  const key = `${build}:${nThreads}`;
  let tg = instances?.get(key);
  if (!tg) {
    tg = instantiateBuild(build, { baseUrl, threads: nThreads });
    if (instances) {
      instances.set(key, tg);
      tg.catch(() => instances.delete(key));  // a failed load is retried next time, not remembered
    }
  }
  return { build, reason, threads: nThreads, needBytes, features, tg: await tg };
}
