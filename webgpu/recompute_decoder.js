// Generation WITHOUT a KV cache on the WebGPU trainer: every token runs the forward of the whole
// current window and reads back the logits of its last position. It exists to measure what
// Decoder.generate's KV cache saves (decoder.js; bench/webgpu/decode_bench.mjs) and to check that
// both give the same tokens; the page never uses it.
//
// One plan of T = ctx positions serves every window length n: the window fills positions 0..n-1 and
// the rest is padding, which causal attention keeps out of position n-1. The padding makes this
// slower than an exact-length forward would be: by less than 2x once the window has first filled
// (it then holds ctx/2+1..ctx tokens), more during the first ctx tokens.
import { Plan } from "./plan.js";
import { SampleStream, sampleToken } from "./prng.js";

export class RecomputeDecoder {
  /** trainer: a Trainer (webgpu/trainer.js); its weights are read at each forward, never copied. */
  constructor(trainer) {
    const { ctx, vocabSize: V } = trainer.cfg;
    this.trainer = trainer;
    // The trainer owns these buffers (Trainer.buffer): trainer.destroy() frees them.
    this.act = trainer.activations("recompute", 1, ctx, ctx);
    this.plan = new Plan(trainer.device, trainer.ops.pipelines, "recompute");
    trainer.recordForward(this.plan, this.act, { B: 1, T: ctx, past: 0, logitRows: ctx });
    this.plan.freeze();
    this.readback = trainer.buffer("recompute logits readback", 4 * V, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    this.tokens = new Uint32Array(ctx); // the padding is token 0
  }

  /** Logits (Float32Array of V) after the last token of `window` (1..ctx tokens), by a full forward. */
  async lastLogits(window) {
    const { device } = this.trainer, V = this.trainer.cfg.vocabSize;
    this.tokens.fill(0).set(window);
    device.queue.writeBuffer(this.act.tokens, 0, this.tokens);
    const enc = device.createCommandEncoder({ label: "recompute" });
    const pass = enc.beginComputePass();
    this.plan.encode(pass);
    pass.end();
    enc.copyBufferToBuffer(this.act.logits, 4 * (window.length - 1) * V, this.readback, 0, 4 * V);
    device.queue.submit([enc.finish()]);
    await this.readback.mapAsync(GPUMapMode.READ);
    const logits = new Float32Array(this.readback.getMappedRange()).slice();
    this.readback.unmap();
    return logits;
  }

  /**
   * maxNewTokens bytes after `prompt`, as Decoder.generate makes them (same sampling, same context
   * policy), so the two must agree token for token.
   */
  async generate(prompt, { maxNewTokens, temperature, topK, seed = 0 }) {
    if (!prompt || prompt.length === 0) throw new Error("generation needs a prompt of at least one byte");
    const ctx = this.trainer.cfg.ctx, stream = new SampleStream(seed);
    // docs/determinism.md's context policy, as Decoder.generate applies it (which keeps it private):
    // a full window restarts from its last ctx/2 tokens before the next one is appended.
    let window = [];
    const advance = (token) => {
      if (window.length >= ctx) window = window.slice(window.length - Math.floor(ctx / 2));
      window.push(token);
    };
    for (const t of prompt) advance(t);
    const out = [];
    for (let n = 0; n < maxNewTokens; n++) {
      const token = sampleToken(await this.lastLogits(window), temperature, topK, stream);
      out.push(token);
      advance(token);
    }
    return Uint8Array.from(out);
  }

  destroy() { this.plan.destroy(); }
}
