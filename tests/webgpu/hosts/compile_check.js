// One WGSL kernel compiled as a GPU driver would be asked to, on any host's device (Node's Dawn or a
// browser's). moduleErrors: its shader module without compilation errors (the WGSL parsed and resolved,
// no pipeline: cheap on every device). compileErrors: that, then a compute pipeline from its one entry
// point (layout "auto"), which adds the device's limits and, on a real backend, the driver's compiler
// (on SwiftShader an LLVM JIT of seconds a kernel). browser_entry.js's compileWgsl (the test page) checks
// the dumped variants with the first; compile_wgsl.mjs (Node) and null_backend_pipelines.mjs (Dawn's
// Null backend, no compiler) with the second.

/** The errors of `work`'s result (a list of messages) and of the validation errors it raised on `device`. */
async function inErrorScope(device, work) {
  device.pushErrorScope("validation");
  const errors = await work();
  const scoped = await device.popErrorScope();
  if (scoped) errors.push(`validation: ${scoped.message}`);
  return errors;
}

/** A shader module's compilation errors, as "line:column message". */
async function compilationErrors(module) {
  return (await module.getCompilationInfo()).messages.filter((m) => m.type === "error")
    .map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
}

/** The errors of compiling `code` into a shader module on `device` ([] when it compiles). */
export function moduleErrors(device, label, code) {
  return inErrorScope(device, () => compilationErrors(device.createShaderModule({ label, code })));
}

/** The errors of compiling `code` into a pipeline on `device` ([] when it compiles). */
export function compileErrors(device, label, code) {
  return inErrorScope(device, async () => {
    const module = device.createShaderModule({ label, code });
    const errors = await compilationErrors(module);
    if (!errors.length) {
      try {
        await device.createComputePipelineAsync({ label, layout: "auto", compute: { module } });
      } catch (e) {
        errors.push(`pipeline: ${e.message}`);
      }
    }
    return errors;
  });
}
