// Whether a WebGPU adapter runs WGSL on the CPU (SwiftShader, llvmpipe): right answers at a small
// fraction of a GPU's speed. The page says so, and the trainer picks matmul tiles that suit it.
const SOFTWARE_NAMES = /swiftshader|llvmpipe/i;

/** info: a GPUAdapterInfo (adapter.info, or a device's adapterInfo); absent, not software. */
export function isSoftwareAdapter(info = {}) {
  return info.isFallbackAdapter === true || SOFTWARE_NAMES.test([info.vendor, info.architecture, info.device, info.description].join(" "));
}
