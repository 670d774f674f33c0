// Node host: a GPUDevice from the npm `webgpu` package (Dawn). The trainer itself never imports this.
// On a machine without a GPU, point VK_ICD_FILENAMES at SwiftShader's Vulkan ICD (webgpu.mk does).
import { create, globals } from "webgpu";
import { requestDeviceWithSubgroups } from "./subgroups.js";
import { trainerLimits } from "./trainer.js";

// The GPU instance and adapter must outlive every device: if the garbage collector takes them, the
// binding's event loop later runs Dawn's ProcessEvents on freed objects and the process crashes at
// random (seen as segfaults and futex aborts once a dispatch runs long enough for a GC to happen).
const alive = [];

/**
 * features: optional features the device must have (an adapter without one is an error).
 * subgroups: ask for the adapter's subgroups where it has them, and probe them (subgroups.js) so
 * that the kernels use them; TINYGPT_SUBGROUPS=0 in the environment turns them off (a benchmark's
 * fallback column).
 * exactTimestamps: timestamp queries at the GPU's own resolution.
 * DAWN_FEATURES (environment, comma-separated Dawn toggles, e.g. disable_robustness) is a diagnostic
 * for benchmarks: what a toggle costs or saves. Browsers run with Dawn's defaults, so no figure
 * taken with it describes the product.
 */
export async function nodeDevice({ powerPreference = "high-performance", features = [], exactTimestamps = false,
  subgroups = process.env.TINYGPT_SUBGROUPS !== "0" } = {}) {
  Object.assign(globalThis, globals);
  const toggles = process.env.DAWN_FEATURES;
  // exactTimestamps: Dawn rounds timestamp queries to ~65 µs unless told not to, which hides a
  // single dispatch's time (a benchmark's choice; execution is the same either way)
  const gpu = create([...(toggles ? [`enable-dawn-features=${toggles}`] : []),
    ...(exactTimestamps ? ["disable-dawn-features=timestamp_quantization"] : [])]);
  alive.push(gpu);
  const adapter = await gpu.requestAdapter({ powerPreference });
  alive.push(adapter);
  if (!adapter) throw new Error("no WebGPU adapter: is a Vulkan driver (or SwiftShader via VK_ICD_FILENAMES) available?");
  const requiredLimits = trainerLimits(adapter);
  const missing = features.filter((f) => !adapter.features.has(f));
  if (missing.length) throw new Error(`this adapter does not offer ${missing.join(", ")}`);
  const { device, subgroups: subgroupUse } = await requestDeviceWithSubgroups(adapter, { requiredLimits, requiredFeatures: features }, { subgroups });
  device.addEventListener("uncapturederror", (e) => {
    console.error(`WebGPU error: ${e.error.message}`);
    process.exitCode = 1;
  });
  return { adapter, device, info: adapter.info, subgroups: subgroupUse };
}
