// Several decoded tokens in one dispatch of one workgroup: for each step, the token's embedding, every
// block (ln1, q/k/v into the KV cache, every head's attention at once, o_proj, ln2, fc_in + GELU,
// fc_out, the residual adds), ln_f, the tied head's logits and the sampler (sample_decode.js's rule), whose
// token the next step embeds. The decode chain (decode_row.js) takes 1 + 2L dependent dispatches a
// token and each costs 6.5-8 µs on an H200 before any work (docs/performance.md §36-38), so a small
// model's token was mostly launches: here a token costs one workgroup's work, which for a model of
// a few MB is less. A step whose token the sampler cannot call certain ends the loop; the host
// samples it (Trainer.generate), as after the chain's sampler.
import { kernel, range, workgroupSum } from "./kernel.js";
import { GELU_FNS } from "./gelu.js";
import { SAMPLE_LOGITS, sampleStep } from "./sample_decode.js";

const THREADS = 256;
const LOADS = 32; // vec4 loads an invocation issues before the first product waits on one (a round)
const UNROLL = 8; // values an attention lane loads at once
const HOISTED = 16; // vec4 loads of a product an invocation may issue ahead of the work before it

/** Invocations an output of a product with N outputs: a power of two, at most 8, all N in one pass where they fit. */
const lanesFor = (N) => Math.max(1, Math.min(8, 2 ** Math.floor(Math.log2(THREADS / N))));

/** Bytes of workgroup memory for width C, H heads and a window of kvT keys. */
const workgroupBytes = (C, H, kvT) => 4 * (C + C + 4 * C) + 4 * THREADS + 4 * H * kvT + 16 * THREADS + 16 * (THREADS / 4) + 4 * 2 * THREADS + 32;

/**
 * Whether the kernel serves a model (nLayer, nHead, dModel C, ctx, vocabSize V) on a device with
 * `limit` bytes of workgroup memory: the vocabulary is one invocation's logit each, heads are whole
 * vec4s, and one invocation writes each vec4 of the row's q, k and v.
 */
export function decodeTokensFits({ nHead: H, dModel: C, ctx, vocabSize: V }, limit = 16384) {
  return C % 4 === 0 && (C / H) % 4 === 0 && 3 * (C / 4) <= THREADS && V <= THREADS
    && workgroupBytes(C, H, ctx) <= limit;
}

export const DECODE_TOKENS_UNIFORMS = ["past", "first", "steps", "V", "top_k", "greedy", "wte_off", "wpe_off", "block_off",
  "block_stride", "ln1_w", "ln1_b", "qkv_w", "qkv_b", "qkv_stride", "o_w", "o_b", "ln2_w", "ln2_b", "in_w", "in_b", "out_w",
  "out_b", "lnf_w", "lnf_b", "kv_layer", "kv_stride"].map((n) => [n, "u32"]).concat([["temperature", "f32"], ["ln_eps", "f32"], ["scale", "f32"]]);

// f32 element i of P (bound as vec4s)
const scalarP = (i) => `P[(${i}) / 4u][(${i}) % 4u]`;
// vec4 i of f32 workgroup array `a`
const vec4At = (a, i) => `vec4f(${a}[4u * (${i})], ${a}[4u * (${i}) + 1u], ${a}[4u * (${i}) + 2u], ${a}[4u * (${i}) + 3u])`;

/**
 * WGSL of a product with one row: for each output o < N, value = Σ_k src's vec4 k · P[weightRow(o) + k]
 * (k < K4; src an f32 workgroup array) plus bias(o) (a WGSL f32 expression; none where null), then
 * epilogue(o, value) (WGSL statements, once per output). lanesFor(N) invocations an output take a
 * strided share of the row and meet in a fixed order in `red`. Returns {loads, math}: where an
 * invocation's loads are few (≤ HOISTED vec4s), `loads` issues them all (names prefixed `name`), to
 * be placed ahead of the work before the product so that their latency hides behind it; else they
 * are in `math`, LOADS at a time. `math` runs the product: uniform control flow, ends with a barrier.
 */
function product({ name, N, K4, src, weightRow, bias = null, epilogue }) {
  const L = lanesFor(N), G = THREADS / L, passes = Math.ceil(N / G), steps = Math.ceil(K4 / L);
  const hoisted = passes * steps <= HOISTED;
  const k = (k0, u) => `${name}_lane + (${k0} + ${u}u) * ${L}u`; // the vec4 of the row that step u of a round from k0 takes
  const weights = (n, k0, count, w) => range(count).map((u) => `let ${w(u)} = P[${name}_row${n} + min(${k(k0, u)}, ${K4 - 1}u)];`).join("\n");
  const fmas = (k0, count, w) => range(count).map((u) =>
    `acc += select(vec4f(0.0), ${vec4At(src, `min(${k(k0, u)}, ${K4 - 1}u)`)}, ${k(k0, u)} < ${K4}u) * ${w(u)};`).join("\n");
  const head = (n) => `let ${name}_o${n} = min(${n * G}u + li / ${L}u, ${N - 1}u);
let ${name}_row${n} = ${weightRow(`${name}_o${n}`)};${bias ? `\nlet ${name}_b${n} = ${bias(`${name}_o${n}`)};` : ""}`;
  const hw = (n) => (u) => `${name}_w${n}_${u}`;
  const loads = `let ${name}_lane = li % ${L}u;\n${range(passes).map((n) => `${head(n)}${hoisted ? `\n${weights(n, "0u", steps, hw(n))}` : ""}`).join("\n")}`;
  const sums = (n) => (hoisted ? fmas("0u", steps, hw(n)) : steps <= LOADS ? `${weights(n, "0u", steps, (u) => `w${u}`)}\n${fmas("0u", steps, (u) => `w${u}`)}`
    : `for (var k0 = 0u; k0 < ${steps}u; k0 += ${LOADS}u) {\n${weights(n, "k0", LOADS, (u) => `w${u}`)}\n${fmas("k0", LOADS, (u) => `w${u}`)}\n}`);
  const value = (n, dot) => (bias ? `(${dot} + ${name}_b${n})` : dot);
  const pass = (n) => /* wgsl */ `
  {
    let o = ${name}_o${n};
    let lane = ${name}_lane;
    var acc = vec4f(0.0);
${sums(n)}
    let part = (acc.x + acc.y) + (acc.z + acc.w);
${L === 1 ? `    if (${n * G}u + li < ${N}u) {
      ${epilogue("o", value(n, "part"))}
    }` : `    red[li] = part;
    workgroupBarrier();
    if (lane == 0u && ${n * G}u + li / ${L}u < ${N}u) {
      var dot = 0.0;
      for (var u = 0u; u < ${L}u; u++) { dot += red[li + u]; }
      ${epilogue("o", value(n, "dot"))}
    }
    workgroupBarrier();`}
  }`;
  return { loads, math: `${range(passes).map(pass).join("")}
  workgroupBarrier();` };
}

/**
 * WGSL: xs = LayerNorm(res) with weight and bias at P's `w`, `b` (as layernorm_forward), as
 * {loads (an invocation's weight and bias, names prefixed `name`, to be placed ahead), math}. Every
 * invocation sums the row itself, in the same order: C reads of workgroup memory cost less than a
 * tree's barriers. math ends with a barrier.
 */
const normalised = (name, w, b) => ({
  loads: `let ${name}_w = ${scalarP(`${w} + min(li, C - 1u)`)};\nlet ${name}_b = ${scalarP(`${b} + min(li, C - 1u)`)};`,
  math: /* wgsl */ `
  {
    var sum = 0.0;
    for (var k = 0u; k < C4; k++) { let x = ${vec4At("res", "k")}; sum += (x.x + x.y) + (x.z + x.w); }
    let mean = sum / f32(C);
    var sq = 0.0;
    for (var k = 0u; k < C4; k++) { let d = ${vec4At("res", "k")} - mean; sq += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w); }
    let rstd = 1.0 / sqrt(sq / f32(C) + p.ln_eps);
    if (li < C) { xs[li] = (res[li] - mean) * rstd * ${name}_w + ${name}_b; }
  }
  workgroupBarrier();`,
});

/**
 * WGSL of every head's attention for the query in `work` (q: its first C floats) over keys 0..keys-1
 * of the KV cache (rows from k_base, v_base), into xs. First a score an invocation (head, key); then
 * lane (g, c) of G key groups and C4 vec4s of the row finds its head's max and Σexp itself (each
 * lane in the same order) and sums the values of keys g, g + G, ...; the groups meet in order.
 */
function attendAll(H, D, kvT) {
  const C4 = (H * D) / 4, D4 = D / 4, G = Math.floor(THREADS / C4);
  const valueLoads = (n, jr) => range(UNROLL).map((u) => `        let ${n}${u} = KV[v_base + min(${jr} + ${u * G}u, keys - 1u) * C4 + c];`).join("\n");
  const valueSums = (n, jr) => range(UNROLL).map((u) =>
    `        acc += select(0.0, exp(scores[hs + min(${jr} + ${u * G}u, keys - 1u)] - mx), ${jr} + ${u * G}u < keys) * ${n}${u};`).join("\n");
  return /* wgsl */ `
      for (var i = li; i < ${H}u * keys; i += THREADS) {
        let h = i / keys;
        let j = i % keys;
        let kb = k_base + j * C4 + h * ${D4}u;
        scores[h * ${kvT}u + j] = (${range(D4).map((d) => `dot(${vec4At("work", `h * ${D4}u + ${d}u`)}, KV[kb + ${d}u])`).join(" + ")}) * p.scale;
      }
      workgroupBarrier();
      var lsum = 1.0;
      if (li < ${G * C4}u) {
        let c = li % C4;
        let g = li / C4;
        let hs = (c / ${D4}u) * ${kvT}u;
${valueLoads("f", "g")}
        // the head's max and Σexp, UNROLL scores loaded at once (a key past the last rereads it)
        var mx = -1.0e30;
        for (var j = 0u; j < keys; j += ${UNROLL}u) {
${range(UNROLL).map((u) => `          let m${u} = scores[hs + min(j + ${u}u, keys - 1u)];`).join("\n")}
          mx = max(mx, ${range(UNROLL).map((u) => `m${u}`).reduce((a, b) => `max(${a}, ${b})`)});
        }
        lsum = 0.0;
        for (var j = 0u; j < keys; j += ${UNROLL}u) {
${range(UNROLL).map((u) => `          let e${u} = select(0.0, exp(scores[hs + min(j + ${u}u, keys - 1u)] - mx), j + ${u}u < keys);`).join("\n")}
${range(UNROLL).map((u) => `          lsum += e${u};`).join("\n")}
        }
        var acc = vec4f(0.0);
${valueSums("f", "g")}
        for (var jr = g + ${UNROLL * G}u; jr < keys; jr += ${UNROLL * G}u) {
${valueLoads("v", "jr")}
${valueSums("v", "jr")}
        }
        vparts[li] = acc;
      }
      workgroupBarrier();
      if (li < C4) {
        var total = vec4f(0.0);
        for (var u = 0u; u < ${G}u; u++) { total += vparts[u * C4 + li]; }
        let y = total / lsum;
        xs[4u * li] = y.x; xs[4u * li + 1u] = y.y; xs[4u * li + 2u] = y.z; xs[4u * li + 3u] = y.w;
      }
      workgroupBarrier();`;
}

// Tokens: [0] the token of step `first` in, the last sampled one out; P: the parameters (manifest
// order: wte at wte_off, wpe at wpe_off, block l's at block_off + l·block_stride with its tensors at
// the *_w, *_b offsets from there; q, k, v weights and biases qkv_stride apart; ln_f at lnf_w, lnf_b);
// KV: layer l's q, k and v rows (kvT, C) at l·kv_layer + {0, 1, 2}·kv_stride, this token's at row
// past + s; draws: step s's uniform at s; samples: step s's record (sample_decode.js) at s·(V + 4).
// Steps first..steps-1, step s at position past + s. Every offset a multiple of 4 floats.
export function decodeTokens({ nLayer: NL, nHead: H, dModel: C, ctx: kvT }) {
  const C4 = C / 4, D = C / H;
  const blk = (name) => `blk + p.${name}`;
  const ln1 = normalised("ln1", blk("ln1_w"), blk("ln1_b")), ln2 = normalised("ln2", blk("ln2_w"), blk("ln2_b"));
  const lnf = normalised("lnf", "p.lnf_w", "p.lnf_b");
  // q, k and v: output o is row o % C of the (o / C)-th projection
  const qkv = product({ name: "qkv", N: 3 * C, K4: C4, src: "xs", weightRow: (o) => `(${blk("qkv_w")} + (${o} / C) * p.qkv_stride + (${o} % C) * C) / 4u`,
    bias: (o) => scalarP(`${blk("qkv_b")} + (${o} / C) * p.qkv_stride + ${o} % C`), epilogue: (o, v) => `work[${o}] = ${v};` });
  const oProj = product({ name: "oproj", N: C, K4: C4, src: "xs", weightRow: (o) => `(${blk("o_w")} + ${o} * C) / 4u`,
    bias: (o) => scalarP(`${blk("o_b")} + ${o}`), epilogue: (o, v) => `res[${o}] = res[${o}] + ${v};` });
  const fcIn = product({ name: "fcin", N: 4 * C, K4: C4, src: "xs", weightRow: (o) => `(${blk("in_w")} + ${o} * C) / 4u`,
    bias: (o) => scalarP(`${blk("in_b")} + ${o}`), epilogue: (o, v) => `work[${o}] = gelu(${v});` });
  const fcOut = product({ name: "fcout", N: C, K4: C, src: "work", weightRow: (o) => `(${blk("out_w")} + ${o} * 4u * C) / 4u`,
    bias: (o) => scalarP(`${blk("out_b")} + ${o}`), epilogue: (o, v) => `res[${o}] = res[${o}] + ${v};` });
  const logits = product({ name: "logit", N: THREADS, K4: C4, src: "xs", weightRow: (o) => `(p.wte_off + min(${o}, p.V - 1u) * C) / 4u`,
    epilogue: (o, v) => `scan[${o}] = ${v};` });
  return kernel(`decode_tokens_l${NL}_h${H}_c${C}_k${kvT}`, DECODE_TOKENS_UNIFORMS,
    [["Tokens", "rw", "u32"], ["P", "read", "vec4f"], ["KV", "rw", "vec4f"], ["draws", "read"], ["samples", "rw"]], /* wgsl */ `${GELU_FNS}${workgroupSum(THREADS)}${SAMPLE_LOGITS}
const THREADS = ${THREADS}u;
const C = ${C}u;
const C4 = ${C4}u;
var<workgroup> scores: array<f32, ${H * kvT}>; // each head's scores
var<workgroup> vparts: array<vec4f, THREADS>; // each value lane's sum
var<workgroup> res: array<f32, C>;      // the residual stream
var<workgroup> xs: array<f32, C>;       // a LayerNorm's output, or the heads' attention output
var<workgroup> work: array<f32, ${4 * C}>; // q, k and v, then fc_in's GELU

@compute @workgroup_size(THREADS)
fn decode_tokens(@builtin(local_invocation_index) li: u32) {
  var token = Tokens[0];
  for (var s = p.first; s < p.steps; s++) {
    let pos = p.past + s;
    let draw = draws[s]; // loaded now, used by the sampler at the step's end
    for (var c = li; c < C4; c += THREADS) {
      let e = P[(p.wte_off + token * C) / 4u + c] + P[(p.wpe_off + pos * C) / 4u + c];
      res[4u * c] = e.x; res[4u * c + 1u] = e.y; res[4u * c + 2u] = e.z; res[4u * c + 3u] = e.w;
    }
    workgroupBarrier();
    for (var l = 0u; l < ${NL}u; l++) {
      let blk = p.block_off + l * p.block_stride;
      let q_base = l * p.kv_layer / 4u;
      let k_base = q_base + p.kv_stride / 4u;
      let v_base = k_base + p.kv_stride / 4u;
${ln1.loads}
${qkv.loads}
${ln1.math}
${oProj.loads}
${qkv.math}
      // into the KV cache at row pos (q too: the views hold it, as the chain's kernel leaves them)
      if (li < 3u * C4) {
        KV[q_base + (li / C4) * (p.kv_stride / 4u) + pos * C4 + li % C4] = ${vec4At("work", "li")};
      }
      storageBarrier();
      let keys = pos + 1u;
${attendAll(H, D, kvT)}
${ln2.loads}
${fcIn.loads}
      // o_proj, added to the residual
${oProj.math}
${fcOut.loads}
${ln2.math}
${fcIn.math}
${fcOut.math}
    }
${lnf.loads}
${logits.loads}
${lnf.math}
    // the tied head: logits into the sampler's scan buffer, which sampleStep reads before it scans
${logits.math}
    let out = s * (p.V + 4u);
${sampleStep({ logitAt: (i) => `scan[${i}]`, V: "p.V", out: "out", topK: "p.top_k", greedy: "p.greedy", temperature: "p.temperature",
    draw: "draw", storeToken: "Tokens[0] = picked.x;" })}
    if (picked.y == 0u) { break; }
    token = picked.x;
  }
}
`, "decode_tokens");
}
