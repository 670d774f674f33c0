// Node resolve hook: files under site/static/ import the WebGPU runtime by its served URL
// (/static/js/engines/x.js -> ../../../webgpu/trainer.js = /webgpu/trainer.js, see server/app.py),
// which on disk would be site/webgpu/. Maps that to the repository's webgpu/, as the server does.
const SERVED = new URL("../../../site/webgpu/", import.meta.url).href;
const ON_DISK = new URL("../../../webgpu/", import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  const url = context.parentURL ? new URL(specifier, context.parentURL).href : null;
  if (url?.startsWith(SERVED)) return nextResolve(ON_DISK + url.slice(SERVED.length), context);
  return nextResolve(specifier, context);
}
