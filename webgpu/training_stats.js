// Training, seen, on the WGSL trainer: a training step measured for the page's training view
// (python_ref/training_stats.py is the reference; the C++ core's tg_train_step_stats its twin). For
// every trained tensor (the model's weights, or a fine-tune's adapters): the sums of squares of its
// gradient (as the backward left it: AdamW scales the gradients by the clip coefficient as it reads
// them and never writes them back, so the buffer holds them before the clip), of its weights before
// the update and of the update. Only a measured step does more than the usual one, and it stays ONE
// submit: its encoder copies the weights aside before the step's pass, and after it one dispatch of
// tensor_sums writes three partial sums per chunk of a tensor, copied to a mappable buffer and summed
// here in double. Every other step is Trainer.step() as ever.
//
// The attention entropy per head of a probe window is taken, after the step, from the q and k that an
// eval forward of the window leaves (webgpu/inspect.js reads them back), in double here.
import { kernel, LINEAR_ID, workgroupSum, grid1d } from "./kernels/kernel.js";
import { Plan } from "./plan.js";
import { mapForReading } from "./buffers.js";
import { causalScores, readQK } from "./inspect.js";

const THREADS = 256;
/** Elements of one tensor each workgroup of tensor_sums sums (the last chunk of a tensor: what is left). */
export const STATS_CHUNK = 4096;

// bounds: [start, end) of every chunk, in floats of the trained buffers; partials: 3 per chunk, [Σ g², Σ w², Σ (w - w_before)²]
// with w the weights after the step and w_before the copy taken before it.
export const tensorSums = kernel("tensor_sums", [["chunks", "u32"]],
  [["grads", "read"], ["params", "read"], ["before", "read"], ["bounds", "read", "u32"], ["partials", "rw"]],
  /* wgsl */ `${workgroupSum(THREADS)}${LINEAR_ID}
@compute @workgroup_size(${THREADS})
fn tensor_sums(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  var g2 = 0.0;
  var w2 = 0.0;
  var d2 = 0.0;
  if (w < p.chunks) {
    let end = bounds[2u * w + 1u];
    for (var i = bounds[2u * w] + li; i < end; i += ${THREADS}u) {
      let g = grads[i];
      let b = before[i];
      let d = params[i] - b;
      g2 = g2 + g * g;
      w2 = w2 + b * b;
      d2 = d2 + d * d;
    }
  }
  let sg = wg_sum(g2, li);
  let sw = wg_sum(w2, li);
  let sd = wg_sum(d2, li);
  if (w < p.chunks && li == 0u) {
    partials[3u * w] = sg;
    partials[3u * w + 1u] = sw;
    partials[3u * w + 2u] = sd;
  }
}
`);

const U = () => GPUBufferUsage;

/**
 * A trainer's measured steps: made at the first one (its buffers: a copy of the trained weights, 4 bytes
 * a trained parameter, and 12 bytes a chunk of partial sums), freed by destroy().
 * trainer.step(batch, stats.measure()) runs one; stats.read() then gives its sums.
 */
export class StepStats {
  constructor(trainer) {
    const lora = trainer.lora;
    this.trainer = trainer;
    this.tensors = lora ? lora.tensors : trainer.entries;
    this.names = this.tensors.map((t) => t.name);
    const weights = lora ? lora.weights : trainer.params, grads = lora ? lora.grads : trainer.grads;
    const n = lora ? lora.Q : trainer.P;
    this.n = n;
    const bounds = [], owner = [];
    this.tensors.forEach((t, i) => {
      for (let s = t.offset; s < t.offset + t.numel; s += STATS_CHUNK) {
        bounds.push(s, Math.min(s + STATS_CHUNK, t.offset + t.numel));
        owner.push(i);
      }
    });
    this.owner = owner;
    const device = trainer.device, chunks = owner.length;
    this.buffers = [];
    const buffer = (label, size, usage) => {
      const b = device.createBuffer({ label, size: Math.max(16, Math.ceil(size / 4) * 4), usage });
      this.buffers.push(b);
      return b;
    };
    this.before = buffer("stats: weights before the step", 4 * n, U().STORAGE | U().COPY_DST);
    const boundsBuffer = buffer("stats: chunk bounds", 8 * chunks, U().STORAGE | U().COPY_DST);
    device.queue.writeBuffer(boundsBuffer, 0, new Uint32Array(bounds));
    this.partials = buffer("stats: partial sums", 12 * chunks, U().STORAGE | U().COPY_SRC);
    this.readback = buffer("stats: readback", 12 * chunks, U().MAP_READ | U().COPY_DST);
    this.weights = weights;
    this.plan = new Plan(device, trainer.ops.pipelines, "training stats");
    this.plan.add(tensorSums, { chunks }, [grads, weights, this.before, boundsBuffer, this.partials], grid1d(chunks));
    this.plan.freeze();
    this.hooks = {
      before: (enc) => enc.copyBufferToBuffer(weights, 0, this.before, 0, 4 * n),
      after: (enc) => {
        const pass = enc.beginComputePass({ label: "training stats" });
        this.plan.encode(pass);
        pass.end();
        enc.copyBufferToBuffer(this.partials, 0, this.readback, 0, 12 * chunks);
      },
    };
  }

  /** What Trainer.step(batch, measure) records around the step's pass. */
  measure() { return this.hooks; }

  /** The last measured step's sums: Float64Array, 3 per trained tensor, the chunks summed in order. */
  async read() {
    await mapForReading(this.readback, "the training statistics");
    const partials = new Float32Array(this.readback.getMappedRange().slice(0));
    this.readback.unmap();
    const sums = new Float64Array(3 * this.tensors.length);
    this.owner.forEach((t, c) => {
      for (let k = 0; k < 3; k++) sums[3 * t + k] += partials[3 * c + k];
    });
    return sums;
  }

  destroy() {
    this.plan.destroy();
    for (const b of this.buffers) b.destroy();
    this.buffers = [];
  }
}

/**
 * The mean attention entropy per head, from the q and k of every layer (Float32Array (L, 2, T, C): layer
 * l's q then its k, as webgpu/inspect.js reads them back), in double: for each query i,
 * ln(sum_j e^(s_j - max)) - sum_j e^(s_j - max)(s_j - max) / sum_j e^(s_j - max), with s_j = q_i·k_j/√D
 * over keys j <= i; then the mean over the T queries. Returns a Float64Array (L·H).
 */
export function entropyFromQK(qk, { nLayer: L, nHead: H, dModel: C }, T) {
  const D = C / H, scale = 1 / Math.sqrt(D), out = new Float64Array(L * H), scores = new Float64Array(T);
  for (let l = 0; l < L; l++) {
    const q = qk.subarray(2 * l * T * C, (2 * l + 1) * T * C), k = qk.subarray((2 * l + 1) * T * C, (2 * l + 2) * T * C);
    for (let h = 0; h < H; h++) {
      let total = 0;
      for (let i = 0; i < T; i++) {
        const max = causalScores(q, k, { C, D, h, i, scale }, scores);
        let sum = 0, weighted = 0;
        for (let j = 0; j <= i; j++) {
          const e = Math.exp(scores[j] - max);
          sum += e;
          weighted += e * (scores[j] - max);
        }
        total += Math.log(sum) - weighted / sum;
      }
      out[l * H + h] = total / T;
    }
  }
  return out;
}

/** tokens (1..ctx bytes) -> Float64Array (L·H): each head's mean attention entropy on them, in nats. */
export async function attentionEntropy(trainer, tokens) {
  const { ctx } = trainer.cfg, T = tokens.length;
  if (T < 1 || T > ctx) throw new Error(`the attention entropy takes 1..${ctx} bytes (the context), got ${T}`);
  // row 0 is the window (attentionWeights says why the rest may be zeros)
  const rows = trainer.tr.batch * ctx, x = new Uint32Array(rows);
  x.set(tokens);
  await trainer.lossOn(x, new Uint32Array(rows));
  return entropyFromQK(await readQK(trainer, T), trainer.cfg, T);
}
