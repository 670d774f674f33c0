// Shared by the benchmarks: a frozen plan replayed `reps` times in one compute pass and one submit
// (each dispatch waits for the previous one, as in a step); returns ms from submit to completion.
export async function replay(device, plan, reps) {
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  for (let r = 0; r < reps; r++) plan.encode(pass);
  pass.end();
  const t0 = performance.now();
  device.queue.submit([enc.finish()]);
  await device.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}
