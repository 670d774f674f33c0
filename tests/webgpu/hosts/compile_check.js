// One WGSL kernel compiled as a GPU driver would be asked to, on any host's device (Node's Dawn or a
// browser's): the shader module without compilation errors, then a compute pipeline from its one
// entry point (layout "auto"). compile_wgsl.mjs (Node) and browser_entry.js's compileWgsl (the test page)
// check the dumped variants with it.

/** The errors of compiling `code` into a pipeline on `device` ([] when it compiles). */
export async function compileErrors(device, label, code) {
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ label, code });
  const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === "error")
    .map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
  if (!errors.length) {
    try {
      await device.createComputePipelineAsync({ label, layout: "auto", compute: { module } });
    } catch (e) {
      errors.push(`pipeline: ${e.message}`);
    }
  }
  const scoped = await device.popErrorScope();
  if (scoped) errors.push(`validation: ${scoped.message}`);
  return errors;
}
