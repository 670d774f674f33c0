// A stand-in GPUDevice that runs nothing: it keeps the WGSL of every shader module created on it and
// answers the rest of the API a Trainer uses with inert objects (buffers hold no memory, maps resolve
// at once with zeros). dump_wgsl.mjs records a Trainer's plans (and a Decoder's on it) there, with no
// GPU and no weights.
import { Trainer } from "../../webgpu/trainer.js";

// WebGPU's flag values, for hosts without a WebGPU implementation (the stand-in ignores them)
globalThis.GPUBufferUsage ??= { MAP_READ: 1, MAP_WRITE: 2, COPY_SRC: 4, COPY_DST: 8, INDEX: 16, VERTEX: 32, UNIFORM: 64, STORAGE: 128, INDIRECT: 256, QUERY_RESOLVE: 512 };
globalThis.GPUShaderStage ??= { VERTEX: 1, FRAGMENT: 2, COMPUTE: 4 };
globalThis.GPUMapMode ??= { READ: 1, WRITE: 2 };

/**
 * A Trainer whose plans are recorded on `device` (a recording device) and whose weights are never
 * made: the plans depend on the config alone, and the largest preset's weights would take GiBs of
 * host memory. Its state is a truthy stand-in that importState ignores.
 */
export function plansOnlyTrainer(device, config, { subgroupWidth, deferWeightGrads, lora = null } = {}) {
  class PlansOnly extends Trainer {
    importState() {}
  }
  const trainer = new PlansOnly(device, config, { state: new Uint8Array(0), subgroupWidth, deferWeightGrads, lora });
  void trainer.trainPlan; // the step is recorded at its first use: here, so that every plan's kernels are made
  return trainer;
}

/**
 * {device, shaders}: shaders maps each shader module's label (a kernel's name) to its WGSL. limits and
 * adapterInfo: what the device reports (none: WebGPU's defaults and a GPU's tiles, as Ops reads them).
 */
export function recordingDevice({ limits, adapterInfo } = {}) {
  const shaders = new Map();
  const inert = () => ({});
  const pass = { setPipeline() {}, setBindGroup() {}, dispatchWorkgroups() {}, end() {} };
  const device = {
    createBuffer: ({ size }) => ({
      size, destroy() {}, unmap() {}, mapAsync: async () => {}, getMappedRange: (offset = 0, bytes = size - offset) => new ArrayBuffer(bytes),
    }),
    createShaderModule({ label, code }) {
      if (shaders.has(label) && shaders.get(label) !== code) throw new Error(`two different shaders named ${label}`);
      shaders.set(label, code);
      return {};
    },
    createBindGroupLayout: inert, createPipelineLayout: inert, createComputePipeline: inert, createBindGroup: inert,
    createComputePipelineAsync: async () => ({}),
    createCommandEncoder: () => ({ beginComputePass: () => pass, copyBufferToBuffer() {}, finish: inert }),
    queue: { writeBuffer() {}, submit() {}, onSubmittedWorkDone: async () => {} },
    destroy() {},
    limits, adapterInfo,
  };
  return { device, shaders };
}
