// Each dispatch's GPU time inside real training steps, on a real GPU (Node + Dawn, timestamp
// queries): the trainer's own step() runs with every dispatch in a compute pass of its own,
// timestamped where the pass begins and ends, so each dispatch is timed in place (its operands where
// the step before left them, the clocks of a running step), unlike the profile's replays of one
// dispatch alone (Trainer.profileStep). Per preset: the median over R steps of each dispatch, summed
// by kernel family; the step's span from the first dispatch's start to the last one's end; and the
// time between dispatches (Dawn's barrier and the next launch).
// --decode: a decoded token's dispatches instead (the KV cache's plan at the window's last position,
// ctx − 1 keys cached by a prefill, and the GPU's sampling of the next token: a batch of one step),
// each timed token queued behind an untimed one, as in generation. These are the decode chain's
// dispatches, at every preset: where a batch decodes in one workgroup by the rule (tiny,
// decode_tokens.js), its one dispatch is timed whole by decode_paths.mjs. --at=P: at position P
// instead (P keys cached, P < ctx), so that attention's share can be told from the rest.
// --clocks-ms=MS: how long the GPU is kept busy before each preset's rounds (replay.mjs raiseClocks;
// default 300; 0 on a software adapter, whose clocks mean nothing and where the 2048³ products take minutes).
//   node bench/webgpu/dispatch_timeline.mjs large,huge [out.json] [R=20] [WARMUP=20] [--decode [--at=P]] [--clocks-ms=300]
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../../webgpu/node_gpu.js";
import { Trainer } from "../../webgpu/trainer.js";
import { Decoder } from "../../webgpu/decoder.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { median, raiseClocks, runSteps } from "./replay.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const decode = process.argv.includes("--decode");
const at = process.argv.find((a) => a.startsWith("--at="))?.slice(5);
const clocksMs = Number(process.argv.find((a) => a.startsWith("--clocks-ms="))?.slice(12) ?? 300);
const [names, outPath, rounds, warmup] = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const R = Number(rounds ?? 20), WARMUP = Number(warmup ?? 20);
const { device } = await nodeDevice({ features: ["timestamp-query"], exactTimestamps: true });
// a kernel's family: its name up to the tile or lane count (matmul_pair_backward_input_64x64w_... -> matmul_pair)
const family = (name) => name.replace(/_(\d+x\d+|lanes|c\d+|d\d+).*$/, "").replace(/^matmul_pair.*/, "matmul_pair");

/**
 * While `timed` is set, a step's compute pass is split into one pass per dispatch, each with its
 * two timestamps (2·i and 2·i + 1 of the query set).
 */
function splitPasses(querySet) {
  const state = { timed: false, count: 0 };
  const createEncoder = device.createCommandEncoder.bind(device);
  device.createCommandEncoder = (descriptor) => {
    const enc = createEncoder(descriptor);
    if (!state.timed) return enc;
    const begin = enc.beginComputePass.bind(enc);
    enc.beginComputePass = () => {
      let pass = null;
      const open = () => {
        if (pass) pass.end();
        const i = state.count++;
        pass = begin({ timestampWrites: { querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } });
      };
      return {
        setPipeline(p) { open(); pass.setPipeline(p); },
        setBindGroup(...a) { pass.setBindGroup(...a); },
        dispatchWorkgroups(...a) { pass.dispatchWorkgroups(...a); },
        end() { if (pass) pass.end(); },
      };
    };
    return enc;
  };
  return { state, restore: () => { device.createCommandEncoder = createEncoder; } };
}

/** The trainer's plan to time, and `round()`: queues one timed run of it behind an untimed one. */
async function trainingRounds(trainer) {
  await runSteps(trainer, WARMUP);
  return {
    entries: trainer.trainPlan.entries,
    async round(split) {
      // the step before keeps the GPU busy, as in training: time the second of two steps in flight
      const before = (await trainer.step()).loss;
      split.state.timed = true;
      const loss = (await trainer.step()).loss;
      split.state.timed = false;
      await Promise.all([before, loss]);
    },
  };
}

/** The decoder's plan at one position to time (a token's dispatches and its sampling), and `round()` as trainingRounds'. */
async function decodeRounds(decoder) {
  const pos = Math.min(Number(at ?? Infinity), decoder.cfg.ctx - 1), prompt = Array.from({ length: pos }, (_, i) => 32 + (i % 90));
  await decoder._prefill(prompt);
  for (let i = 0; i < WARMUP; i++) await decoder._decode(66, pos);
  decoder.ahead = null;
  const { samplePlan } = decoder, commands = samplePlan ? () => decoder._batchCommands(pos, 1) : () => decoder._decodeCommands(pos);
  return {
    position: pos,
    entries: [...decoder.genPlan.entries, ...(samplePlan ? [samplePlan.entries[0]] : [])],
    async round(split) {
      const before = commands();
      split.state.timed = true;
      const timed = commands();
      split.state.timed = false;
      decoder.device.queue.submit([before.commands, timed.commands]);
      await decoder.device.queue.onSubmittedWorkDone();
    },
  };
}

const out = {};
for (const name of names.split(",")) {
  const trainer = new Trainer(device, configFromPresets(presets, name), { corpus });
  const decoder = decode ? new Decoder(trainer, { decodeInOneWorkgroup: false }) : null;
  const { entries, round, position } = await (decode ? decodeRounds(decoder) : trainingRounds(trainer));
  const n = entries.length;
  const querySet = device.createQuerySet({ type: "timestamp", count: 2 * n });
  const resolved = device.createBuffer({ size: 16 * n, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const readback = device.createBuffer({ size: 16 * n, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  // compiling and the first steps left the GPU idle, so its clocks may still be low: medium timed
  // first in a process read a 5.6 ms step span, against 1.48 when it followed small (H100)
  await raiseClocks(device, trainer.ops, clocksMs);
  const split = splitPasses(querySet);
  const runs = []; // per round: [start, end] of each dispatch in µs from the first one's start
  for (let r = 0; r < R; r++) {
    split.state.count = 0;
    await round(split);
    const enc = device.createCommandEncoder();
    enc.resolveQuerySet(querySet, 0, 2 * n, resolved, 0);
    enc.copyBufferToBuffer(resolved, 0, readback, 0, 16 * n);
    device.queue.submit([enc.finish()]);
    await readback.mapAsync(GPUMapMode.READ);
    const ts = new BigInt64Array(readback.getMappedRange().slice(0));
    readback.unmap();
    runs.push(entries.map((_, i) => [Number(ts[2 * i] - ts[0]) / 1e3, Number(ts[2 * i + 1] - ts[0]) / 1e3]));
  }
  split.restore();
  const dispatches = entries.map((e, i) => ({ name: e.kernel.name, us: median(runs.map((run) => run[i][1] - run[i][0])),
    gapUs: i ? median(runs.map((run) => run[i][0] - run[i - 1][1])) : 0 }));
  const families = {};
  for (const d of dispatches) {
    const f = (families[family(d.name)] ??= { family: family(d.name), count: 0, us: 0 });
    f.count += 1;
    f.us += d.us;
  }
  const spanUs = median(runs.map((run) => run[n - 1][1]));
  const busyUs = dispatches.reduce((s, d) => s + d.us, 0), gapUs = dispatches.reduce((s, d) => s + d.gapUs, 0);
  out[name] = { ...(decode ? { position } : {}), dispatches: n, spanUs, busyUs, gapUs, families: Object.values(families).sort((a, b) => b.us - a.us), each: dispatches };
  console.log(`${name}: ${n} dispatches, ${decode ? `token (position ${position})` : "step"} span ${(spanUs / 1e3).toFixed(3)} ms = ${(busyUs / 1e3).toFixed(3)} ms in dispatches + ` +
    `${(gapUs / 1e3).toFixed(3)} ms between them (median ${median(dispatches.slice(1).map((d) => d.gapUs)).toFixed(1)} µs)`);
  for (const f of out[name].families) {
    console.log(`  ${f.family.padEnd(34)} ${String(f.count).padStart(4)} × ${(f.us / f.count).toFixed(1).padStart(7)} µs = ${(f.us / 1e3).toFixed(3)} ms (${(100 * f.us / busyUs).toFixed(0)}%)`);
  }
  await decoder?.destroy();
  trainer.destroy();
  for (const x of [querySet, resolved, readback]) x.destroy();
}
if (outPath) writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
device.destroy();
