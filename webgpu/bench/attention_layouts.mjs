// Attention's two kernels (forward, backward: dq and dk/dv in one dispatch) on each preset's shape, in every
// workgroup layout worth trying (kernels/attention.js attentionLayout: rows a workgroup owns, split
// invocations a row, tile rows of the other side in workgroup memory), on a real GPU: the data
// behind ATTENTION_LAYOUTS, each kind's (forward, backward) default.
//   node webgpu/bench/attention_layouts.mjs [--presets large,huge] [--clocks-ms 300] [--out FILE]
// Each kernel is timed as matmul_tiles.mjs times a product: reps back-to-back dispatches in one pass,
// µs per dispatch.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../node_gpu.js";
import { Ops } from "../ops.js";
import { Plan } from "../plan.js";
import { raiseClocks, replayMicroseconds, benchArgs } from "./replay.mjs";
import { attentionForward, attentionLayout, ATTENTION_LAYOUTS } from "../kernels/attention.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const args = benchArgs();
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const names = (args.presets ?? "medium,large,xl,huge,massive").split(",").filter(Boolean);
const clocksMs = Number(args["clocks-ms"] ?? 300);
const { device } = await nodeDevice();
const ops = new Ops(device);
const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
const same = (a, b) => a.rows === b.rows && a.split === b.split && a.tile === b.tile && a.queries === b.queries;

/**
 * The layouts tried for head size D: each kind's default, and rows × split / queries of 64–256
 * invocations with tiles of 16–64 rows (as many as fit); the forward's also with 2 or 4 queries an
 * invocation.
 */
function layouts(D) {
  const out = Object.values(ATTENTION_LAYOUTS).map((options) => {
    const { rows, split, tile, queries } = attentionLayout(D, options);
    return { rows, split, tile, queries };
  }).filter((l, i, all) => all.findIndex((m) => same(l, m)) === i);
  for (const rows of [16, 32, 64]) {
    for (const split of [2, 4, 8, 16]) {
      for (const queries of [1, 2, 4]) {
      if (rows % queries || ![64, 128, 256].includes((rows / queries) * split)) continue;
      for (const tile of [16, 32, 64]) {
        // at most 8 rows of a tile an invocation: its loops are unrolled, and 16 took SwiftShader's
        // compiler past this machine's memory
        if (tile / split > 8) continue;
        try {
          attentionForward(D, attentionLayout(D, { rows, split, tile, queries }));
        } catch (e) {
          if (/does not fit/.test(e.message)) continue; // more workgroup memory than the kernels may take
          throw e;
        }
        if (!out.some((l) => same(l, { rows, split, tile, queries }))) out.push({ rows, split, tile, queries });
      }
      }
    }
  }
  return out;
}

/** µs per dispatch of each kernel, for one preset's shape and one layout. */
async function time({ B, T, H, C }, layout) {
  const n = B * T * C, buf = (m) => device.createBuffer({ size: 4 * m, usage: S });
  const [q, k, v, out, dout] = Array.from({ length: 5 }, () => buf(n));
  const stride = Math.ceil(n / 64) * 64, [qkv, dqkv, lse] = [buf(3 * stride), buf(3 * stride), buf(B * H * T)];
  const plans = {
    forward: (plan) => ops.attentionForward(plan, { B, T, kvT: T, past: 0, H, C, q, k, v, out, lse, layout }),
    backward: layout.queries > 1 ? null : (plan) => ops.attentionBackward(plan, { B, T, H, C, qkv: { buffer: qkv, stride }, out, lse, dout, dqkv: { buffer: dqkv, stride }, layout }),
  };
  const us = {};
  for (const [name, record] of Object.entries(plans)) {
    if (!record) continue; // the backward takes one row an invocation
    const plan = new Plan(device, ops.pipelines, `attention ${name}`);
    record(plan);
    plan.freeze();
    us[name] = await replayMicroseconds(device, plan);
    plan.destroy();
  }
  for (const b of [q, k, v, out, dout, qkv, dqkv, lse]) b.destroy();
  return us;
}

const results = [];
for (const name of names) {
  const p = presets.presets[name], shape = { B: p.batch, T: p.ctx, H: p.nHead, C: p.dModel }, D = p.dModel / p.nHead;
  const candidates = layouts(D), rows = [];
  for (const layout of candidates) await time({ ...shape, B: 1, T: 16 }, layout); // compiles each
  await raiseClocks(device, ops, clocksMs);
  // the first layout timed after the clocks are raised (the defaults) read up to 3.4× slow on an H100
  // (large's backward 116.4 µs, 34.2 in the next call): it is timed once and thrown away first
  await time(shape, candidates[0]);
  for (const layout of candidates) rows.push({ layout, ...(await time(shape, layout)) });
  const defaults = Object.fromEntries(Object.entries(ATTENTION_LAYOUTS).map(([kind, o]) => [kind, attentionLayout(D, o)]));
  results.push({ preset: name, D, defaults, rows });
  const fmt = (r, kind) => `r${r.layout.rows} s${r.layout.split} t${r.layout.tile} q${r.layout.queries} ${r[kind].toFixed(1)}`;
  for (const kind of ["forward", "backward"]) {
    const best = rows.filter((r) => r[kind] !== undefined).sort((a, b) => a[kind] - b[kind]);
    console.error(`${name} (D ${D}, ×${p.nLayer} layers) ${kind}: default ${fmt(rows.find((r) => same(r.layout, defaults[kind])), kind)} us; ` +
      `best ${best.slice(0, 4).map((r) => fmt(r, kind)).join(", ")}`);
  }
}
if (args.out) writeFileSync(args.out, JSON.stringify(results) + "\n");
device.destroy();
