// The WebGPU adapter as Dawn under Node (the npm `webgpu` package that bench.mjs uses) reports it:
// its info, every optional feature it offers and every limit, once with Dawn's defaults (what a page in
// Chrome would be offered) and once with Dawn's allow_unsafe_apis toggle, under which Dawn also lists its
// experimental features (e.g. chromium-experimental-subgroup-matrix), so that the two lists' difference
// names what only a flag would unlock. A diagnostic of what the GPU offers; the trainer asks only for
// `subgroups` (webgpu/subgroups.js) and the limits of trainer.js TRAINER_LIMITS.
//   node bench/webgpu/adapter_features.mjs [--out FILE]
// Writes one JSON object (to FILE, else stdout) and a short summary on stderr.
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { benchArgs } from "./replay.mjs";

// the package as webgpu/node_gpu.js imports it (webgpu/node_modules/webgpu): the same Dawn build
const require = createRequire(new URL("../../webgpu/node_gpu.js", import.meta.url));
const { create, globals } = await import(pathToFileURL(require.resolve("webgpu")).href);
Object.assign(globalThis, globals);
const args = benchArgs();

// attributes of a WebIDL object (GPUSupportedLimits, GPUAdapterInfo) live as getters on its prototypes
function attributes(obj) {
  const out = {};
  const names = new Set();
  for (let p = obj; p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const k of Object.getOwnPropertyNames(p)) names.add(k);
  }
  for (const k of [...names].sort()) {
    if (k === "constructor" || k === "__proto__") continue;
    let v;
    try {
      v = obj[k];
    } catch {
      continue;
    }
    if (typeof v === "function") continue;
    out[k] = typeof v === "bigint" ? Number(v) : v;
  }
  return out;
}

const alive = []; // keep instances and adapters from the garbage collector (webgpu/node_gpu.js says why)
async function describe(flags) {
  const gpu = create(flags);
  alive.push(gpu);
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  alive.push(adapter);
  if (!adapter) return { flags, adapter: null };
  const info = attributes(adapter.info);
  // the matrix units' shapes (issue 61): objects whose fields are getters, so each is read out on its own
  if (Array.isArray(info.subgroupMatrixConfigs)) info.subgroupMatrixConfigs = info.subgroupMatrixConfigs.map(attributes);
  return { flags, info, features: [...adapter.features].sort(), limits: attributes(adapter.limits) };
}

const base = await describe([]);
const unsafe = await describe(["enable-dawn-features=allow_unsafe_apis"]);
const out = {
  node: process.version,
  webgpuPackage: require("webgpu/package.json").version,
  default: base,
  allowUnsafeApis: unsafe,
  onlyWithUnsafeApis: (unsafe.features ?? []).filter((f) => !(base.features ?? []).includes(f)),
};
const json = JSON.stringify(out, null, 1);
if (args.out) writeFileSync(args.out, json + "\n"); else console.log(json);
if (base.info) {
  const l = base.limits;
  console.error(`adapter: ${base.info.vendor} / ${base.info.architecture} / ${base.info.device} / ${base.info.description}` +
    ` (subgroup sizes ${base.info.subgroupMinSize}-${base.info.subgroupMaxSize})`);
  console.error(`features: ${base.features.join(", ")}`);
  console.error(`only with allow_unsafe_apis: ${out.onlyWithUnsafeApis.join(", ") || "none"}`);
  console.error(`shader-f16: ${base.features.includes("shader-f16") ? "offered" : "not offered"}; subgroup matrix ` +
    `configs with allow_unsafe_apis: ${JSON.stringify(unsafe.info?.subgroupMatrixConfigs ?? [])}`);
  console.error(`maxStorageBufferBindingSize ${l.maxStorageBufferBindingSize}, maxBufferSize ${l.maxBufferSize}, ` +
    `maxComputeWorkgroupStorageSize ${l.maxComputeWorkgroupStorageSize}, maxComputeInvocationsPerWorkgroup ${l.maxComputeInvocationsPerWorkgroup}`);
} else {
  console.error("no WebGPU adapter");
  process.exitCode = 1;
}
