// What this page can use here, said in words: the feature list ticks only what the page can use in
// this context, and "Auto" picks a hardware WebGPU adapter or falls back to WebAssembly, saying why.
import { detectFeatures } from "./wasm_loader.js";
import { probe as probeWebGPU } from "./engines/webgpu_engine.js";

export function item(ok, text) {
  const li = document.createElement("li");
  li.className = ok ? "yes" : "no";
  li.textContent = text;
  return li;
}

/** {wasm: detectFeatures(), gpu: probe(), items: [<li>]} */
export async function browserSupport() {
  const [f, gpu] = await Promise.all([detectFeatures(), probeWebGPU().catch((e) => ({ ok: false, reason: e.message }))]);
  const isolated = f.threads;  // threads need cross-origin isolation; relaxed and Memory64 builds need threads
  const items = [
    item(f.simd, f.simd ? "WebAssembly SIMD" : "No WebAssembly SIMD: the slow scalar build will run"),
    item(f.relaxedSimd && isolated, !f.relaxedSimd
      ? "No WebAssembly relaxed SIMD: the build without fused multiply-add will run"
      : isolated ? "WebAssembly relaxed SIMD (fused multiply-add)"
        : `WebAssembly relaxed SIMD is in this engine, but its build needs threads: ${f.threadsMissing}`),
    item(f.threads, f.threads ? `WebAssembly threads: cross-origin isolated, ${f.cores} cores`
      : `No WebAssembly threads: ${f.threadsMissing}; training runs on one core`),
    item(f.memory64 && isolated, !f.memory64 ? "No WebAssembly Memory64: models are limited to 4 GiB"
      : isolated ? "WebAssembly Memory64 (models over 4 GiB)"
        : `WebAssembly Memory64 is in this engine, but its build needs threads: ${f.threadsMissing}`),
    item(gpu.ok, gpu.ok ? `WebGPU: ${gpu.name}${gpu.software ? " (a software adapter: correct, not fast)" : ""}`
      : `No WebGPU: ${gpu.reason}`),
  ];
  if (gpu.ok) {
    // what the adapter offers beyond WebGPU's core: the trainer uses subgroups for its reductions; shader-f16 is
    // what a half-precision trainer would need (issue 61: not built, so training stays fp32 either way)
    items.push(item(gpu.subgroups, gpu.subgroups ? "WebGPU subgroups: used in the trainer's reductions"
      : "No WebGPU subgroups on this adapter: the trainer's reductions take their plain path"));
    items.push(item(gpu.f16, gpu.f16 ? "WebGPU shader-f16: offered; training here stays fp32 (no half-precision trainer yet)"
      : "No WebGPU shader-f16 on this adapter: half-precision training could not run here; training is fp32"));
  }
  return { wasm: f, gpu, items };
}

/** {backend, why}: the backend a pick resolves to here, and one line saying why. */
export function resolveBackend(pick, gpu) {
  if (pick === "wasm") return { backend: "wasm", why: "WebAssembly, as picked." };
  if (pick === "webgpu") {
    if (!gpu.ok) throw new Error(`WebGPU cannot run here: ${gpu.reason}. Pick WebAssembly or Auto.`);
    return { backend: "webgpu", why: gpu.software ? `WebGPU on ${gpu.name}, as picked: software: correct, not fast.` : `WebGPU on ${gpu.name}, as picked.` };
  }
  if (!gpu.ok) return { backend: "wasm", why: `Auto chose WebAssembly: ${gpu.reason}.` };
  if (gpu.software) return { backend: "wasm", why: `Auto chose WebAssembly: the only WebGPU adapter is software (${gpu.name}); pick WebGPU to use it anyway.` };
  return { backend: "webgpu", why: `Auto chose WebGPU: a hardware adapter (${gpu.name}).` };
}
