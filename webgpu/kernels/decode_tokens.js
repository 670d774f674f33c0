// Several decoded tokens in one dispatch of one workgroup: for each step, the token's embedding, every
// block (ln1, q/k/v into the KV cache, every head's attention at once, o_proj, ln2, fc_in + GELU,
// fc_out, the residual adds), ln_f, the tied head's logits and the sampler (sample_decode.js's rule), whose
// token the next step embeds. The decode chain (decode_row.js) takes 1 + 2L dependent dispatches a
// token and each has a fixed cost before any work (see docs/lab/2026-11-28-decoding-on-the-gpu.md
// §36–38), so a small model's token was mostly launches: here a token costs one workgroup's work,
// which for a model of a few MB is less. A step whose token the sampler cannot call certain ends the loop; the host
// samples it (Decoder.generate), as after the chain's sampler.
import { kernel, range } from "./kernel.js";
import { GELU_FNS } from "./gelu.js";
import { SAMPLE_LOGITS, sampleStep } from "./sample_decode.js";
import { scalarP } from "./decode_row.js";

const THREADS = 256;
const LOADS = 32; // vec4 loads an invocation issues before the first product waits on one (a round)
const UNROLL = 8; // values an attention lane loads at once
const HOISTED = 16; // vec4 loads of a product an invocation may issue ahead of the work before it

/** Invocations an output of a product with N outputs: a power of two, at most 8, all N in one pass where they fit. */
const lanesFor = (N) => Math.max(1, Math.min(8, 2 ** Math.floor(Math.log2(THREADS / N))));

// The fewest invocations an output where a product's loads are hoisted. Its passes then run side by
// side, so a lane's chain of dependent steps is K4/4 long: at tiny, one lane an output took 12 steps,
// four take 3, and the token is faster for it (see docs/lab/2026-11-29-decode-batches-on-the-gpu.md §42).
const MIN_LANES = 4;

/** A product's layout (N outputs, rows of K4 vec4s): {L lanes an output, G outputs a pass, passes, steps a lane, hoisted}. */
function productLayout(N, K4) {
  const layout = (L) => {
    const G = THREADS / L, passes = Math.ceil(N / G), steps = Math.ceil(K4 / L);
    return { L, G, passes, steps, hoisted: passes * steps <= HOISTED };
  };
  const wide = layout(Math.max(lanesFor(N), MIN_LANES));
  return wide.hoisted ? wide : layout(lanesFor(N));
}

/**
 * The step's products at width C, as {N outputs, K4 vec4s a row, rows (the head's logits take row 0
 * only)}: decodeTokens generates them, and `partials` is sized by them.
 */
const stepProducts = (C, rows) => ({
  qkv: { N: 3 * C, K4: C / 4, rows }, oproj: { N: C, K4: C / 4, rows }, fcin: { N: 4 * C, K4: C / 4, rows },
  fcout: { N: C, K4: C, rows }, logit: { N: THREADS, K4: C / 4, rows: 1 },
});

/** Bytes of workgroup memory for width C, H heads, a window of kvT keys and `rows` rows a step (2: the next window's too). */
const workgroupBytes = (C, H, kvT, rows = 1) => 4 * rows * (C + C + 4 * C) + 4 * partialsFloats(C, rows) + 4 * H * (kvT + (rows - 1) * keptOf(kvT))
  + 16 * (THREADS / 4) + 8 * 2 * THREADS + 32;

/**
 * Floats of `partials`: attention's value lanes' sums (a vec4 each), or a product's partial sums
 * (every pass's at once where its passes run side by side), whichever is more.
 */
const partialsFloats = (C, rows) => Math.max(4 * THREADS, ...Object.values(stepProducts(C, rows)).map(({ N, K4, rows: r }) => {
  const { passes, hoisted } = productLayout(N, K4);
  return (hoisted ? passes : 1) * r * THREADS;
}));

// A full window restarts from its last KEPT tokens (docs/determinism.md's context policy).
const keptOf = (kvT) => Math.floor(kvT / 2);

/**
 * Whether the kernel serves a model (nLayer, nHead, dModel C, ctx, vocabSize V) on a device with
 * `limit` bytes of workgroup memory: the vocabulary is one invocation's logit each, heads are whole
 * vec4s, and one invocation writes each vec4 of the row's q, k and v.
 */
export function decodeTokensFits({ nHead: H, dModel: C, ctx, vocabSize: V }, limit = 16384) {
  return C % 4 === 0 && (C / H) % 4 === 0 && 3 * (C / 4) <= THREADS && V <= THREADS
    && workgroupBytes(C, H, ctx) <= limit;
}

/**
 * Whether each step also computes the next window's row of its token (its KV rows at its position
 * less ctx − ⌊ctx/2⌋), so that a window's restart copies rows instead of rebuilding them: where both
 * rows fit WebGPU's default 16 KiB and half the invocations cover a row's q, k and v. A fixed rule,
 * not the device's, since the generation's KV cache is laid out by it (decodeNextRowsFloats).
 */
export const decodeTokensKeepsNext = (model) => decodeTokensFits(model) && model.dModel <= 128
  && workgroupBytes(model.dModel, model.nHead, model.ctx, 2) <= 16384;

/** Floats of the next window's q, k and v rows (every layer's, ⌊ctx/2⌋ each) past the KV cache's layers, where the kernel keeps them. */
export const decodeNextRowsFloats = (model) => (decodeTokensKeepsNext(model) ? 3 * model.nLayer * keptOf(model.ctx) * model.dModel : 0);

export const DECODE_TOKENS_UNIFORMS = ["rebuild", "steps", "V", "top_k", "greedy", "wte_off", "wpe_off", "block_off",
  "block_stride", "ln1_w", "ln1_b", "qkv_w", "qkv_b", "qkv_stride", "o_w", "o_b", "ln2_w", "ln2_b", "in_w", "in_b", "out_w",
  "out_b", "lnf_w", "lnf_b", "kv_layer", "kv_stride"].map((n) => [n, "u32"]).concat([["temperature", "f32"], ["ln_eps", "f32"], ["scale", "f32"]]);

// vec4 i of f32 workgroup array `a`
const vec4At = (a, i) => `vec4f(${a}[4u * (${i})], ${a}[4u * (${i}) + 1u], ${a}[4u * (${i}) + 2u], ${a}[4u * (${i}) + 3u])`;

/**
 * WGSL of a product over the step's `rows` rows: for each output o < N and row r, value = Σ_k src's vec4
 * k of row r · P[weightRow(o) + k] (k < K4; src an f32 workgroup array, its rows 4·K4 floats apart)
 * plus bias(o) (a WGSL f32 expression; none where null), then epilogue(o, value, r) (WGSL statements,
 * once per output and row). L invocations an output (productLayout) take a strided share of the row
 * and meet in a fixed order in `partials`; each weight a lane loads serves every row. Returns {loads,
 * math}: where an invocation's loads are few (≤ HOISTED vec4s), `loads` issues them all (names
 * prefixed `name`), to be placed ahead of the work before the product so that their latency hides
 * behind it, and the passes run side by side; else the loads are in `math`, LOADS at a time, and the
 * passes one after another. `math` runs the product: uniform control flow, ends with a barrier.
 */
function product({ name, N, K4, rows, src, weightRow, bias = null, epilogue }) {
  const { L, G, passes, steps, hoisted } = productLayout(N, K4);
  const R = range(rows), passList = range(passes);
  const k = (k0, u) => `${name}_lane + (${k0} + ${u}u) * ${L}u`; // the vec4 of the row that step u of a round from k0 takes
  const weights = (n, k0, count, w) => range(count).map((u) => `let ${w(u)} = P[${name}_row${n} + min(${k(k0, u)}, ${K4 - 1}u)];`).join("\n");
  // acc(r) += row r's vec4 of step u (0 past K4) · weight w(u)
  const fma = (k0, u, w, acc, r) =>
    `${acc} += select(vec4f(0.0), ${vec4At(src, `${r * K4}u + min(${k(k0, u)}, ${K4 - 1}u)`)}, ${k(k0, u)} < ${K4}u) * ${w(u)};`;
  const fmas = (k0, count, w) => range(count).map((u) => R.map((r) => fma(k0, u, w, `acc${r}`, r)).join("\n")).join("\n");
  const head = (n) => `let ${name}_o${n} = min(${n * G}u + li / ${L}u, ${N - 1}u);
let ${name}_row${n} = ${weightRow(`${name}_o${n}`)};${bias ? `\nlet ${name}_b${n} = ${bias(`${name}_o${n}`)};` : ""}`;
  const hw = (n) => (u) => `${name}_w${n}_${u}`;
  const loads = `let ${name}_lane = li % ${L}u;\n${passList.map((n) => `${head(n)}${hoisted ? `\n${weights(n, "0u", steps, hw(n))}` : ""}`).join("\n")}`;
  const value = (n, dot) => (bias ? `(${dot} + ${name}_b${n})` : dot);
  // pass n's lanes meet: lane 0 of each output sums the L partial sums of each row at `at(r)`
  const meet = (n, at) => `    if (lane == 0u && ${n * G}u + li / ${L}u < ${N}u) {
      let o = ${name}_o${n};
${R.map((r) => `      var dot${r} = 0.0;
      for (var u = 0u; u < ${L}u; u++) { dot${r} += partials[${at(r)} + li + u]; }
      ${epilogue("o", value(n, `dot${r}`), r)}`).join("\n")}
    }`;
  const sum = (acc) => `(${acc}.x + ${acc}.y) + (${acc}.z + ${acc}.w)`;
  if (hoisted) {
    // every pass's steps side by side (independent chains), then one meeting
    const at = (n) => (r) => `${(n * rows + r) * THREADS}u`;
    return { loads, math: /* wgsl */ `
  {
    let lane = ${name}_lane;
${passList.map((n) => R.map((r) => `    var acc${n}_${r} = vec4f(0.0);`).join("\n")).join("\n")}
${range(steps).map((u) => passList.map((n) => R.map((r) => `    ${fma("0u", u, hw(n), `acc${n}_${r}`, r)}`).join("\n")).join("\n")).join("\n")}
${passList.map((n) => R.map((r) => `    partials[${at(n)(r)} + li] = ${sum(`acc${n}_${r}`)};`).join("\n")).join("\n")}
    workgroupBarrier();
${passList.map((n) => meet(n, at(n))).join("\n")}
  }
  workgroupBarrier();` };
  }
  const sums = (n) => (steps <= LOADS ? `${weights(n, "0u", steps, (u) => `w${u}`)}\n${fmas("0u", steps, (u) => `w${u}`)}`
    : `for (var k0 = 0u; k0 < ${steps}u; k0 += ${LOADS}u) {\n${weights(n, "k0", LOADS, (u) => `w${u}`)}\n${fmas("k0", LOADS, (u) => `w${u}`)}\n}`);
  const pass = (n) => /* wgsl */ `
  {
    let lane = ${name}_lane;
${R.map((r) => `    var acc${r} = vec4f(0.0);`).join("\n")}
${sums(n)}
${L === 1 ? `    if (${n * G}u + li < ${N}u) {
      let o = ${name}_o${n};
${R.map((r) => `      ${epilogue("o", value(n, sum(`acc${r}`)), r)}`).join("\n")}
    }` : `${R.map((r) => `    partials[${r * THREADS}u + li] = ${sum(`acc${r}`)};`).join("\n")}
    workgroupBarrier();
${meet(n, (r) => `${r * THREADS}u`)}
    workgroupBarrier();`}
  }`;
  return { loads, math: `${passList.map(pass).join("")}
  workgroupBarrier();` };
}

/**
 * WGSL: xs = LayerNorm(res) with weight and bias at P's `w`, `b` (as layernorm_forward), for each of
 * the step's `rows` rows (C floats apart; invocations li / SPAN take row li / SPAN), as {loads (an
 * invocation's weight and bias, names prefixed `name`, to be placed ahead), math}. Every invocation
 * sums its row itself, in the same order: C reads of workgroup memory cost less than a tree's
 * barriers. math ends with a barrier.
 */
const normalised = (name, w, b, rows = 1) => {
  const span = THREADS / rows, c = rows > 1 ? `li % ${span}u` : "li", base = rows > 1 ? `(li / ${span}u) * C` : "0u";
  return {
    loads: `let ${name}_w = ${scalarP(`${w} + min(${c}, C - 1u)`)};\nlet ${name}_b = ${scalarP(`${b} + min(${c}, C - 1u)`)};`,
    math: /* wgsl */ `
  {
    let base = ${base};
    var sum = 0.0;
    for (var k = 0u; k < C4; k++) { let x = ${vec4At("res", "base / 4u + k")}; sum += (x.x + x.y) + (x.z + x.w); }
    let mean = sum / f32(C);
    var sq = 0.0;
    for (var k = 0u; k < C4; k++) { let d = ${vec4At("res", "base / 4u + k")} - mean; sq += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w); }
    let rstd = 1.0 / sqrt(sq / f32(C) + p.ln_eps);
    let c = ${c};
    if (c < C) { xs[base + c] = (res[base + c] - mean) * rstd * ${name}_w + ${name}_b; }
  }
  workgroupBarrier();`,
  };
};

/**
 * WGSL of every head's attention for the step's `rows` queries in `work` (row r's q: its first C floats
 * from r·4C) into xs (row r from r·C): row 0 over keys 0..keys-1 of the KV cache (rows from k_base,
 * v_base), row 1 (the next window's) over skeys keys from sk_base, sv_base. First a score an
 * invocation (row, head, key); then invocations li / SPAN take row li / SPAN: lane (g, c) of G key
 * groups and C4 vec4s of the row finds its head's max and Σexp itself (each lane in the same order)
 * and sums the values of keys g, g + G, ...; the groups meet in order.
 */
function attendAll(H, D, kvT, rows) {
  const C4 = (H * D) / 4, D4 = D / 4, span = THREADS / rows, G = Math.floor(span / C4), kept = keptOf(kvT);
  const ofRow = (main, next) => (rows > 1 ? `select(${main}, ${next}, r == 1u)` : main);
  const valueLoads = (n, jr) => range(UNROLL).map((u) => `        let ${n}${u} = KV[vb + min(${jr} + ${u * G}u, n - 1u) * C4 + c];`).join("\n");
  const valueSums = (n, jr) => range(UNROLL).map((u) =>
    `        acc += select(0.0, exp(scores[hs + min(${jr} + ${u * G}u, n - 1u)] - mx), ${jr} + ${u * G}u < n) * ${n}${u};`).join("\n");
  return /* wgsl */ `
      {
      for (var i = li; i < ${H}u * ${rows > 1 ? "(keys + skeys)" : "keys"}; i += THREADS) {
        let r = ${rows > 1 ? `select(0u, 1u, i >= ${H}u * keys)` : "0u"};
        let n = ${ofRow("keys", "skeys")};
        let ir = i - r * ${H}u * keys;
        let h = ir / n;
        let j = ir % n;
        let kb = ${ofRow("k_base", "sk_base")} + j * C4 + h * ${D4}u;
        scores[r * ${H * kvT}u + h * ${ofRow(`${kvT}u`, `${kept}u`)} + j] = (${range(D4).map((d) =>
    `dot(${vec4At("work", `r * C + h * ${D4}u + ${d}u`)}, KV[kb + ${d}u])`).join(" + ")}) * p.scale;
      }
      workgroupBarrier();
      var lsum = 1.0;
      let r = ${rows > 1 ? `li / ${span}u` : "0u"};
      let lr = li % ${span}u;
      if (lr < ${G * C4}u) {
        let c = lr % C4;
        let g = lr / C4;
        let n = ${ofRow("keys", "skeys")};
        let vb = ${ofRow("v_base", "sv_base")};
        let hs = r * ${H * kvT}u + (c / ${D4}u) * ${ofRow(`${kvT}u`, `${kept}u`)};
${valueLoads("f", "g")}
        // the head's max and Σexp, UNROLL scores loaded at once (a key past the last rereads it)
        var mx = -1.0e30;
        for (var j = 0u; j < n; j += ${UNROLL}u) {
${range(UNROLL).map((u) => `          let m${u} = scores[hs + min(j + ${u}u, n - 1u)];`).join("\n")}
          mx = max(mx, ${range(UNROLL).map((u) => `m${u}`).reduce((a, b) => `max(${a}, ${b})`)});
        }
        lsum = 0.0;
        for (var j = 0u; j < n; j += ${UNROLL}u) {
${range(UNROLL).map((u) => `          let e${u} = select(0.0, exp(scores[hs + min(j + ${u}u, n - 1u)] - mx), j + ${u}u < n);`).join("\n")}
${range(UNROLL).map((u) => `          lsum += e${u};`).join("\n")}
        }
        var acc = vec4f(0.0);
${valueSums("f", "g")}
        for (var jr = g + ${UNROLL * G}u; jr < n; jr += ${UNROLL * G}u) {
${valueLoads("v", "jr")}
${valueSums("v", "jr")}
        }
        partials[4u * li] = acc.x; partials[4u * li + 1u] = acc.y; partials[4u * li + 2u] = acc.z; partials[4u * li + 3u] = acc.w;
      }
      workgroupBarrier();
      if (lr < C4) {
        var total = vec4f(0.0);
        for (var u = 0u; u < ${G}u; u++) { total += ${vec4At("partials", `r * ${span}u + u * C4 + lr`)}; }
        let y = total / lsum;
        let at = r * C + 4u * lr;
        xs[at] = y.x; xs[at + 1u] = y.y; xs[at + 2u] = y.z; xs[at + 3u] = y.w;
      }
      workgroupBarrier();
      }`;
}

/** Floats of the kernel's scratch for rebuilding a window: every row's residual, LayerNorm output and fc_in output. */
export const decodeRowsFloats = ({ dModel: C, ctx }) => 6 * C * ctx;

// The window's rebuild (rows 0..R-1 of the KV cache from Window's tokens first..first+R-1, at positions
// 0..R-1): a prompt, a window after a restart, or one the host sampled into; with `next`, the next
// window's rows (past the cache's layers) of a window the host sampled into. Every phase spreads the R rows' work over the
// invocations, so a weight row is read once for the rows an invocation takes, and the rows' activations
// live in `Rows` (vec4s: residuals at RES, LayerNorm and attention outputs at XS, fc_in's at HID), with a
// storageBarrier between phases. It replaces the prefill's forward plan, 3 + 9L dispatches.

// WGSL: layer l's parameters (blk) and its q, k and v rows in KV (vec4 indices)
const LAYER_BASES = /* wgsl */ `    let blk = p.block_off + l * p.block_stride;
    let q_base = l * p.kv_layer / 4u;
    let k_base = q_base + p.kv_stride / 4u;
    let v_base = k_base + p.kv_stride / 4u;`;

// WGSL: layer l's q, k and v rows of the next window (KEPT rows a view, vec4 indices)
const NEXT_BASES = /* wgsl */ `    let sq_base = next_base(l);
    let sk_base = sq_base + KEPT * C4;
    let sv_base = sk_base + KEPT * C4;`;

// The largest divisor of n that is at most `most`: the k-steps a round of a loop's loads takes.
const roundOf = (n, most) => Math.max(...range(most).map((u) => u + 1).filter((u) => n % u === 0));

// WGSL: for each row r < R and vec4 c < C4, Rows[dst] row r = LayerNorm(Rows[src] row r) (weight, bias at
// P's w, b). Each lane loads its row once, in rounds of loads issued together.
const rowsNormalised = (C4, src, dst, w, b) => {
  const U = roundOf(C4, 16);
  const loads = range(U).map((u) => `        let x${u} = Rows[${src} + r * C4 + k0 + ${u}u];`).join("\n");
  return /* wgsl */ `
    for (var i = li; i < R * C4; i += THREADS) {
      let r = i / C4;
      let c = i % C4;
      var sum = 0.0;
      for (var k0 = 0u; k0 < C4; k0 += ${U}u) {
${loads}
        sum += ${range(U).map((u) => `(x${u}.x + x${u}.y) + (x${u}.z + x${u}.w)`).join(" + ")};
      }
      let mean = sum / f32(C);
      var sq = 0.0;
      for (var k0 = 0u; k0 < C4; k0 += ${U}u) {
${loads}
${range(U).map((u) => `        let d${u} = x${u} - mean;\n        sq += dot(d${u}, d${u});`).join("\n")}
      }
      let rstd = 1.0 / sqrt(sq / f32(C) + p.ln_eps);
      Rows[${dst} + r * C4 + c] = (Rows[${src} + r * C4 + c] - mean) * rstd * P[(${w}) / 4u + c] + P[(${b}) / 4u + c];
    }
    storageBarrier();`;
};

/**
 * WGSL of a product over R rows: for each row r and vec4 o4 of N4 outputs, y = (Σ_k Rows[src + r·K4 + k]
 * · P[weight(4·o4 + j) + k] for j < 4) + bias(o4) (a WGSL vec4f), then store(y) (statements; r, o4 in
 * scope). A lane takes one vec4 of outputs for a block of RB rows, so that each weight it loads serves
 * RB rows; RB is the fewest rows that keep a window restart's ctx/2 rows to one pass of the
 * invocations. Its loads go out in rounds of U k-steps at once: a round waits on memory once.
 */
const rowsProduct = ({ N4, K4, kvT, src, weight, bias, store }) => {
  const RB = [1, 2, 4].find((rb) => N4 * Math.ceil(Math.floor(kvT / 2) / rb) <= THREADS) ?? 4;
  const U = roundOf(K4, Math.max(1, Math.floor(24 / (4 + RB)))); // ≤ 24 vec4 loads in flight a lane
  return /* wgsl */ `
    for (var t = li; t < ${N4}u * ((R + ${RB - 1}u) / ${RB}u); t += THREADS) {
      let o4 = t % ${N4}u;
      let r0 = (t / ${N4}u) * ${RB}u;
${range(RB).map((m) => `      let x${m}_row = ${src} + min(r0 + ${m}u, R - 1u) * ${K4}u;`).join("\n")}
${range(4).map((j) => `      let w${j} = ${weight(`(4u * o4 + ${j}u)`)};`).join("\n")}
${range(RB).map((m) => `      var a${m} = mat4x4f();`).join("\n")}
      for (var k0 = 0u; k0 < ${K4}u; k0 += ${U}u) {
${range(U).map((u) => range(4).map((j) => `        let w${j}_${u} = P[w${j} + k0 + ${u}u];`).join("\n")).join("\n")}
${range(U).map((u) => range(RB).map((m) => `        let x${m}_${u} = Rows[x${m}_row + k0 + ${u}u];`).join("\n")).join("\n")}
${range(U).map((u) => range(RB).map((m) => range(4).map((j) => `        a${m}[${j}] += x${m}_${u} * w${j}_${u};`).join("\n")).join("\n")).join("\n")}
      }
${range(RB).map((m) => `      if (r0 + ${m}u < R) {
        let r = r0 + ${m}u;
        let y = vec4f(${range(4).map((j) => `(a${m}[${j}].x + a${m}[${j}].y) + (a${m}[${j}].z + a${m}[${j}].w)`).join(", ")}) + ${bias};
        ${store}
      }`).join("\n")}
    }
    storageBarrier();`;
};

/**
 * WGSL of every row's attention over its keys 0..r (causal), into Rows[XS]: lane (r, h, d) of a head's
 * vec4 d keeps a running max and Σexp over the keys (one pass) and its vec4 of the weighted values,
 * KU keys a round with their loads issued together (a key past r rereads key r, masked out).
 */
const rowsAttention = (H, D4) => {
  const KU = Math.max(1, Math.min(4, Math.floor(16 / (D4 + 1))));
  return /* wgsl */ `
    for (var i = li; i < R * ${H * D4}u; i += THREADS) {
      let r = i / ${H * D4}u;
      let hd = i % ${H * D4}u;
      let h = hd / ${D4}u;
      let qb = q_base + r * C4 + h * ${D4}u;
${range(D4).map((d) => `      let q${d} = KV[qb + ${d}u];`).join("\n")}
      var mx = -1.0e30;
      var lsum = 0.0;
      var acc = vec4f(0.0);
      for (var j0 = 0u; j0 <= r; j0 += ${KU}u) {
${range(KU).map((u) => `        let j${u} = min(j0 + ${u}u, r);
${range(D4).map((d) => `        let k${u}_${d} = KV[k_base + j${u} * C4 + h * ${D4}u + ${d}u];`).join("\n")}
        let v${u} = KV[v_base + j${u} * C4 + hd];`).join("\n")}
${range(KU).map((u) => `        let s${u} = (${range(D4).map((d) => `dot(q${d}, k${u}_${d})`).join(" + ")}) * p.scale;`).join("\n")}
        let m = max(mx, ${range(KU).map((u) => `s${u}`).reduce((a, b) => `max(${a}, ${b})`)});
        let shrink = exp(mx - m);
${range(KU).map((u) => `        let e${u} = select(0.0, exp(s${u} - m), j0 + ${u}u <= r);`).join("\n")}
        lsum = lsum * shrink + ${range(KU).map((u) => `e${u}`).join(" + ")};
        acc = acc * shrink + ${range(KU).map((u) => `e${u} * v${u}`).join(" + ")};
        mx = m;
      }
      Rows[XS + r * C4 + hd] = acc / lsum;
    }
    storageBarrier();`;
};

/**
 * WGSL of fn rebuild_window(R, first, next, li): the KV cache's rows 0..R-1 (every layer) from Window's
 * tokens first..first+R-1 at positions 0..R-1; with `next`, the next window's rows.
 */
function rebuildWindow(NL, H, C, kvT) {
  const C4 = C / 4, blk = (name) => `blk + p.${name}`;
  const qkv = rowsProduct({ N4: 3 * C4, K4: C4, kvT, src: "XS", weight: (o) => `(${blk("qkv_w")} + (${o} / C) * p.qkv_stride + (${o} % C) * C) / 4u`,
    bias: `P[(${blk("qkv_b")} + (o4 / C4) * p.qkv_stride) / 4u + o4 % C4]`,
    store: "KV[q_base + (o4 / C4) * view + r * C4 + o4 % C4] = y;" });
  const oProj = rowsProduct({ N4: C4, K4: C4, kvT, src: "XS", weight: (o) => `(${blk("o_w")} + ${o} * C) / 4u`, bias: `P[(${blk("o_b")}) / 4u + o4]`,
    store: "Rows[RES + r * C4 + o4] += y;" });
  const fcIn = rowsProduct({ N4: 4 * C4, K4: C4, kvT, src: "XS", weight: (o) => `(${blk("in_w")} + ${o} * C) / 4u`, bias: `P[(${blk("in_b")}) / 4u + o4]`,
    store: `Rows[HID + r * ${4 * C4}u + o4] = vec4f(gelu(y.x), gelu(y.y), gelu(y.z), gelu(y.w));` });
  const fcOut = rowsProduct({ N4: C4, K4: 4 * C4, kvT, src: "HID", weight: (o) => `(${blk("out_w")} + ${o} * 4u * C) / 4u`,
    bias: `P[(${blk("out_b")}) / 4u + o4]`, store: "Rows[RES + r * C4 + o4] += y;" });
  return /* wgsl */ `
fn rebuild_window(R: u32, first: u32, next: bool, li: u32) {
  for (var i = li; i < R * C4; i += THREADS) {
    let r = i / C4;
    Rows[RES + i] = P[(p.wte_off + Window[1u + first + r] * C) / 4u + i % C4] + P[p.wpe_off / 4u + i];
  }
  storageBarrier();
  for (var l = 0u; l < ${NL}u; l++) {
    let blk = p.block_off + l * p.block_stride;
    let view = select(p.kv_stride / 4u, KEPT * C4, next);
    let q_base = select(l * p.kv_layer / 4u, next_base(l), next);
    let k_base = q_base + view;
    let v_base = k_base + view;
${rowsNormalised(C4, "RES", "XS", blk("ln1_w"), blk("ln1_b"))}
${qkv}
${rowsAttention(H, C4 / H)}
${oProj}
${rowsNormalised(C4, "RES", "XS", blk("ln2_w"), blk("ln2_b"))}
${fcIn}
${fcOut}
  }
}
`;
}

// Window: [0] the window's length w (its last token the next to decode, at position w - 1), then its
// tokens; the kernel appends each sampled token, restarting a full window from its last KEPT = ⌊ctx/2⌋
// tokens (docs/determinism.md's context policy). P: the parameters (manifest order: wte at wte_off,
// wpe at wpe_off, block l's at block_off + l·block_stride with its tensors at the *_w, *_b offsets
// from there; q, k, v weights and biases qkv_stride apart; ln_f at lnf_w, lnf_b); KV: layer l's q, k
// and v rows (kvT, C) at l·kv_layer + {0, 1, 2}·kv_stride, then (with `next`) the next window's rows
// (decodeNextRowsFloats); draws: step s's uniform at s; samples: step s's record (sample_decode.js) at
// s·(V + 4); Rows: the rebuild's scratch (decodeRowsFloats). With `rebuild`, rows 0..w-2 are rebuilt
// first (a window the host wrote). Every offset a multiple of 4 floats.
//
// With `next` (decodeTokensKeepsNext), a step at position pos ≥ NEXT_FROM = ctx − KEPT also computes
// its token's row in the window that the restart will leave (position pos − NEXT_FROM): one more row
// through every product, on weights the step loads anyway. A restart then copies those rows in place
// of rebuild_window's KEPT rows, which cost a tiny window several steps' time (see
// docs/lab/2026-11-29-decode-batches-on-the-gpu.md §42). Without it, a restart rebuilds.
export function decodeTokens({ nLayer: NL, nHead: H, dModel: C, ctx: kvT }, next = false) {
  const C4 = C / 4, D = C / H, rows = next ? 2 : 1, span = THREADS / rows, kept = keptOf(kvT);
  const blk = (name) => `blk + p.${name}`, shapes = stepProducts(C, rows);
  const ln1 = normalised("ln1", blk("ln1_w"), blk("ln1_b"), rows), ln2 = normalised("ln2", blk("ln2_w"), blk("ln2_b"), rows);
  const lnf = normalised("lnf", "p.lnf_w", "p.lnf_b");
  // q, k and v: output o is row o % C of the (o / C)-th projection
  const qkv = product({ name: "qkv", ...shapes.qkv, src: "xs", weightRow: (o) => `(${blk("qkv_w")} + (${o} / C) * p.qkv_stride + (${o} % C) * C) / 4u`,
    bias: (o) => scalarP(`${blk("qkv_b")} + (${o} / C) * p.qkv_stride + ${o} % C`), epilogue: (o, v, r) => `work[${r * 4 * C}u + ${o}] = ${v};` });
  const oProj = product({ name: "oproj", ...shapes.oproj, src: "xs", weightRow: (o) => `(${blk("o_w")} + ${o} * C) / 4u`,
    bias: (o) => scalarP(`${blk("o_b")} + ${o}`), epilogue: (o, v, r) => `res[${r * C}u + ${o}] += ${v};` });
  const fcIn = product({ name: "fcin", ...shapes.fcin, src: "xs", weightRow: (o) => `(${blk("in_w")} + ${o} * C) / 4u`,
    bias: (o) => scalarP(`${blk("in_b")} + ${o}`), epilogue: (o, v, r) => `work[${r * 4 * C}u + ${o}] = gelu(${v});` });
  const fcOut = product({ name: "fcout", ...shapes.fcout, src: "work", weightRow: (o) => `(${blk("out_w")} + ${o} * 4u * C) / 4u`,
    bias: (o) => scalarP(`${blk("out_b")} + ${o}`), epilogue: (o, v, r) => `res[${r * C}u + ${o}] += ${v};` });
  const logits = product({ name: "logit", ...shapes.logit, src: "xs", weightRow: (o) => `(p.wte_off + min(${o}, p.V - 1u) * C) / 4u`,
    epilogue: (o, v) => `scan[${o}].x = ${v};` });
  // the step's rows of q, k and v into the KV cache: row 0 at pos, the next window's at next_pos (q too:
  // the views hold it, as the chain's kernel leaves them)
  const storeQkv = next ? /* wgsl */ `
      if (li % ${span}u < 3u * C4) {
        let m = li % ${span}u;
        if (li < ${span}u) {
          KV[q_base + (m / C4) * (p.kv_stride / 4u) + pos * C4 + m % C4] = ${vec4At("work", "m")};
        } else if (pos >= NEXT_FROM) {
          KV[sq_base + (m / C4) * KEPT * C4 + next_pos * C4 + m % C4] = ${vec4At("work", "C + m")};
        }
      }` : /* wgsl */ `
      if (li < 3u * C4) {
        KV[q_base + (li / C4) * (p.kv_stride / 4u) + pos * C4 + li % C4] = ${vec4At("work", "li")};
      }`;
  // a full window's restart: the next window's rows copied into rows 0..KEPT-1, or rebuilt
  const restartRows = next ? /* wgsl */ `
      for (var i = li; i < ${NL * 3 * kept}u * C4; i += THREADS) {
        let l = i / (3u * KEPT * C4);
        let view = (i / (KEPT * C4)) % 3u;
        KV[l * p.kv_layer / 4u + view * (p.kv_stride / 4u) + i % (KEPT * C4)] = KV[next_base(0u) + i];
      }
      storageBarrier();` : /* wgsl */ `
      rebuild_window(KEPT, 0u, false, li);`;
  const name = `decode_tokens_l${NL}_h${H}_c${C}_k${kvT}${next ? "_next" : ""}`;
  return kernel(name, DECODE_TOKENS_UNIFORMS,
    [["Window", "rw", "u32"], ["P", "read", "vec4f"], ["KV", "rw", "vec4f"], ["draws", "read"], ["samples", "rw"], ["Rows", "rw", "vec4f"]],
    /* wgsl */ `${GELU_FNS}${SAMPLE_LOGITS}
const THREADS = ${THREADS}u;
const NL = ${NL}u;
const C = ${C}u;
const C4 = ${C4}u;
const KV_T = ${kvT}u;
const KEPT = ${kept}u; // the tokens a full window restarts from
const NEXT_FROM = ${kvT - kept}u; // the first position whose token the next window keeps
const RES = 0u;
const XS = ${kvT * C4}u;
const HID = ${2 * kvT * C4}u;
var<workgroup> window_length: u32;
var<workgroup> scores: array<f32, ${H * (kvT + (rows - 1) * kept)}>; // each head's scores, a row's after another's
// a product's lanes' partial sums (each pass's and row's), or attention's value lanes' (a vec4 each)
var<workgroup> partials: array<f32, ${partialsFloats(C, rows)}>;
var<workgroup> res: array<f32, ${rows * C}>;      // the residual stream of each row
var<workgroup> xs: array<f32, ${rows * C}>;       // a LayerNorm's output, or the heads' attention output
var<workgroup> work: array<f32, ${rows * 4 * C}>; // q, k and v, then fc_in's GELU

// layer l's q row 0 of the next window (vec4 index), past every layer's rows; its k and v rows follow
fn next_base(l: u32) -> u32 { return NL * p.kv_layer / 4u + l * 3u * KEPT * C4; }
${rebuildWindow(NL, H, C, kvT)}
@compute @workgroup_size(THREADS)
fn decode_tokens(@builtin(local_invocation_index) li: u32) {
  if (li == 0u) { window_length = Window[0]; }
  var w = workgroupUniformLoad(&window_length);
  if (p.rebuild != 0u) {
    rebuild_window(w - 1u, 0u, false, li);${next ? `
    if (w - 1u > NEXT_FROM) { rebuild_window(w - 1u - NEXT_FROM, NEXT_FROM, true, li); }` : ""}
  }
  var token = Window[w];
  for (var s = 0u; s < p.steps; s++) {
    let pos = w - 1u;
    let next_pos = max(pos, NEXT_FROM) - NEXT_FROM; // the token's position in the next window
    let draw = draws[s]; // loaded now, used by the sampler at the step's end
    for (var c = li; c < ${rows}u * C4; c += THREADS) {
      let at = select(pos, next_pos, c >= C4);
      let e = P[(p.wte_off + token * C) / 4u + c % C4] + P[(p.wpe_off + at * C) / 4u + c % C4];
      res[4u * c] = e.x; res[4u * c + 1u] = e.y; res[4u * c + 2u] = e.z; res[4u * c + 3u] = e.w;
    }
    workgroupBarrier();
    for (var l = 0u; l < NL; l++) {
${LAYER_BASES}${next ? `\n${NEXT_BASES}` : ""}
${ln1.loads}
${qkv.loads}
${ln1.math}
${oProj.loads}
${qkv.math}
${storeQkv}
      storageBarrier();
      let keys = pos + 1u;${next ? "\n      let skeys = next_pos + 1u;" : ""}
${attendAll(H, D, kvT, rows)}
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
${sampleStep({ logitAt: (i) => `scan[${i}].x`, V: "p.V", out: "out", topK: "p.top_k", greedy: "p.greedy", temperature: "p.temperature",
    draw: "draw" })}
    if (picked.y == 0u) { break; }
    // the token joins the window; a full one restarts from its last KEPT tokens, at positions 0..
    if (w == KV_T) {
      var kept = 0u;
      if (li < KEPT) { kept = Window[1u + KV_T - KEPT + li]; }
      storageBarrier();
      if (li < KEPT) { Window[1u + li] = kept; }
      storageBarrier();
      w = KEPT;
${restartRows}
    }
    if (li == 0u) { Window[1u + w] = picked.x; }
    w += 1u;
    token = picked.x;
  }
  if (li == 0u) { Window[0] = w; }
}
`, "decode_tokens");
}
