// Matrix products C (M,N) = op(A)·op(B) [+ bias(N)] [+ C] [+ R], tiled in workgroup memory with
// register blocking. Three forms (MATMUL_FORMS) read the operands where they lie, so no transpose is
// ever materialised (weights stay PyTorch's [out, in]); the residual adds (wasm/src/residual.h) are
// the forward's R epilogue.
// A WX×WY workgroup owns a BM×BN tile (BM = WY·TM, BN = WX·TN); invocation (tx, ty) owns rows
// ty + WY·i and columns tx + WX·j (interleaved, so workgroup-memory reads and global writes are
// contiguous across a warp), or, where it owns 4k of them, runs of 4 read as vec4s (slabGeometry).
// Operands laid out on multiples of 4 floats are loaded as vec4s too, and on tiles of runs of 4 the
// outputs are loaded and stored 4 at a time (vecAligned, storesVec4). TinyGPT's products
// are small (a few hundred rows and columns), so on a big GPU they are latency-bound: the next K-slab
// is loaded into registers while the current one is multiplied, and the tile is chosen per shape to
// put enough workgroups in flight (chooseTile).
import { kernel, LINEAR_ID, range } from "./kernel.js";
import { GELU_FNS } from "./gelu.js";

/**
 * Epilogue flags. gelu: also G[idx] = gelu(C[idx]) (fc_in's forward: h and its activation in one
 * pass); geluGrad: C = product · gelu'(R) (fc_out's input gradient, R = fc_in's output h).
 */
export const MATMUL_FLAGS = { bias: 1, accumulate: 2, residual: 4, biasGrad: 8, gelu: 16, geluGrad: 32 };

/**
 * The forms, named by the product each computes for a Linear y = x·Wᵀ + b (wasm/src/matmul.h's
 * matmul_forward, and the two halves of its matmul_backward); aT/bT: A or B is read transposed.
 *   forward:          C = A(M,K) · B(N,K)ᵀ    y  = x · Wᵀ + b
 *   backward_input:   C = A(M,K) · B(K,N)     dx = dy · W
 *   backward_weight:  C = A(K,M)ᵀ · B(K,N)    dW = dyᵀ · x   (and, fused, db = Σ_k dy[k,:])
 */
export const MATMUL_FORMS = {
  forward: { aT: false, bT: true },
  backward_input: { aT: false, bT: false },
  backward_weight: { aT: true, bT: false },
};
const formOf = (form) => {
  const f = MATMUL_FORMS[form];
  if (!f) throw new Error(`unknown matmul form ${form}; one of ${Object.keys(MATMUL_FORMS).join(", ")}`);
  return f;
};

/**
 * Tile shapes by name "BMxBN[w][-kBK][-sKG]" (threads = WX·WY·KG ≤ 256; workgroup memory ≤ 16 KiB,
 * WebGPU's default, except where a tile says otherwise: workgroupBytes).
 * KG > 1 slices K: the workgroup is KG groups of WX×WY invocations (lid.z: the group) that load each
 * BK-deep slab together and multiply BK/KG rows of it each, and group 0 adds the other groups' sums
 * at the end. A product with few output tiles and a long K then has KG times the invocations at
 * work on each tile, with no partial sums in global memory and no second dispatch (split-K's cost).
 * These are the tiles chooseTile picks on a GPU and their software twins (softwareTile). Others the
 * tile bench tried and no preset's product ever chose on an H100 or H200 (128x64, 32x32w, 32x64w,
 * 128x64w, 32x64w-k32, 64x32-s2, 32x64-s2) are listed in docs/lab/2026-11-26-wgsl-step-subgroups.md §19.
 */
export const MATMUL_TILES = {
  "128x128": { WX: 16, WY: 16, BK: 8, TM: 8, TN: 8 },
  // 64 or 128 invocations with 4×4 or 8×4 outputs each: the software twins of the tiles below
  "64x64": { WX: 16, WY: 8, BK: 16, TM: 8, TN: 4 },
  "64x32": { WX: 8, WY: 16, BK: 16, TM: 4, TN: 4 },
  "32x64": { WX: 16, WY: 8, BK: 16, TM: 4, TN: 4 },
  "32x32": { WX: 8, WY: 8, BK: 16, TM: 4, TN: 4 },
  // 256 invocations with 4×4 outputs each
  "64x64w": { WX: 16, WY: 16, BK: 16, TM: 4, TN: 4 },
  // a K-step of 32: half the barriers, twice the loads in flight, for long K on few tiles
  "32x32w-k32": { WX: 16, WY: 16, BK: 32, TM: 2, TN: 2 },
  // 4×4 outputs per invocation with 32-deep K-steps: products of K = C…4C on a few hundred tiles
  // pay per K-step, and these take half the steps of their BK-16 twins. (A 64-invocation 32×32
  // twin was as fast, but its scalar variant, 32 prefetch registers an invocation, made
  // SwiftShader's compiler take > 14 GB.)
  "64x32-k32": { WX: 8, WY: 16, BK: 32, TM: 4, TN: 4 },
  "32x64-k32": { WX: 16, WY: 8, BK: 32, TM: 4, TN: 4 },
  // sliced K: 4×4 outputs per invocation, 128 or 256 invocations on a 32×32 tile
  "32x32-s2": { WX: 8, WY: 8, BK: 32, TM: 4, TN: 4, KG: 2 },
  "32x32-s4": { WX: 8, WY: 8, BK: 32, TM: 4, TN: 4, KG: 4 },
  // 128×128 with 16-deep K-steps: 18.9 KiB of workgroup memory in the forward, so only on devices
  // that offer more than WebGPU's default 16 KiB (workgroupBytes, chooseTile)
  "128x128-k16": { WX: 16, WY: 16, BK: 16, TM: 8, TN: 8 },
};
const each = (I, J, f) => range(I).flatMap((i) => range(J).map((j) => f(i, j))).join("\n");
export const tileShape = (name) => {
  const t = MATMUL_TILES[name];
  if (!t) throw new Error(`unknown matmul tile ${name}; one of ${Object.keys(MATMUL_TILES).join(", ")}`);
  const KG = t.KG ?? 1;
  return { ...t, KG, BM: t.WY * t.TM, BN: t.WX * t.TN, threads: t.WX * t.WY * KG };
};

/**
 * split: the split-K form for products with few output tiles and a long K (weight gradients, K = B·T):
 * split z sums K-range [z·k_chunk, (z+1)·k_chunk) into a slab of p.len floats of `partials`, and
 * matmulSplitFinal adds the slabs in order (deterministic, no atomics) and applies the epilogue,
 * for several such products in one dispatch.
 * With flags.biasGrad (backward_weight only) the column sums of A, Σ_k A[k, m], land right after C's M·N values
 * (the manifest keeps each Linear's bias right after its weight): the first column of workgroups
 * sums the A tiles it already holds in workgroup memory.
 * Batches (workgroup z = batch·splits + split): batch i reads A at a_off + i·a_zs, B at b_off + i·b_zs,
 * the bias at bias_off + i·bias_zs, and writes C at c_off + i·c_zs — the q, k and v projections of a
 * layer in one dispatch (their weights lie C·C + C apart in the manifest).
 * kcat: instead, the kcat products A_i·B_i (K each, strides a_zs and b_zs) are summed into one C, as
 * one product over K·kcat: the input gradient dq·Wq + dk·Wk + dv·Wv in one dispatch.
 */
export const MATMUL_UNIFORMS = ["M", "N", "K", "a_off", "b_off", "c_off", "bias_off", "r_off", "flags", "k_chunk", "len",
  "splits", "kcat", "a_zs", "b_zs", "c_zs", "bias_zs"];
export const MATMUL_BUFFERS = [["A", "read"], ["B", "read"], ["bias", "read"], ["R", "read"], ["C", "rw"], ["G", "rw"]];

/**
 * The LayerNorm prologue of a forward product (matmulKernel's `ln`): A holds x, and the product
 * multiplies LayerNorm(x) = (x - mean)·rstd·w + b (w, b read from B's buffer, the parameters, at
 * ln_w_off and ln_b_off), so the LayerNorm needs no dispatch of its own. Each workgroup first
 * computes its rows' mean and rstd (two passes over the row, as layernorm_forward: no cancellation
 * when |mean| ≫ std); the workgroups of the first column tile also write what the backward reads:
 * LayerNorm(x) into LN (at A's offsets) and (mean, rstd) into LNS from float ln_stats_off.
 * The kernel is compiled for the row's length (ln = K), so that each statistics pass over a row is
 * unrolled and its loads can all be in flight at once; as a loop to the uniform K, every such product
 * at medium (8 iterations a pass) took longer in a step (see docs/lab/2026-11-27-wgsl-step-deferred-weight-gradients.md §33).
 */
export const LN_UNIFORMS = [["ln_w_off", "u32"], ["ln_b_off", "u32"], ["ln_stats_off", "u32"], ["ln_eps", "f32"]];
export const LN_BUFFERS = [["LN", "rw"], ["LNS", "rw"]];
// the most steps a lane's statistics pass over a row is unrolled to (past that, a loop)
const LN_UNROLLED = 16;

/**
 * The softmax cross-entropy prologue of the tied head's input gradient (matmulKernel's `ce`): A holds
 * the logits, and the product multiplies d(mean loss)/d(logits) = (softmax − onehot(target))·ce_scale
 * (cross_entropy_backward's), so the cross-entropy needs no dispatch of its own. Each workgroup first
 * computes its rows' log-sum-exp (a max pass, then a Σexp pass over the row, as cross_entropy_backward);
 * the workgroups of the first column tile also write what the step reads later: the gradient into DL
 * (at A's offsets; the deferred head weight gradient's dY) and each row's loss into losses. Compiled
 * for the row's length V (ce = K), as the LayerNorm prologue is. A's rows start at 0: targets[m] and
 * losses[m] are row m's.
 */
const CE_UNIFORMS = [["ce_scale", "f32"]];
const CE_BUFFERS = [["targets", "read", "u32"], ["losses", "rw"], ["DL", "rw"]];

/**
 * A product's slab geometry: vA/vB, whether an invocation owns its rows (columns) in runs of 4 and
 * reads them from workgroup memory as vec4s (rows 4·ty + 4·WY·g + c; otherwise rows ty + WY·i,
 * interleaved, read one by one): for an 8×8 tile, 4 reads per 64 FMAs instead of 16. AS/BS: the
 * row strides of the slabs in workgroup memory. A slab loaded k-fastest is stored transposed: a warp
 * then stores BK k-rows × 32/BK columns, and a row stride ≡ 32/BK (mod 32 banks) spreads those stores
 * over the banks (≥ 4 where rows are read as vec4s, which need a row stride that is a multiple of 4).
 */
function slabGeometry(form, tile) {
  const { BM, BN, BK, TM, TN } = tileShape(tile);
  const { aT, bT } = formOf(form);
  const vA = TM % 4 === 0, vB = TN % 4 === 0;
  const pad = (v) => Math.max(v ? 4 : 1, 32 / BK);
  return { vA, vB, AS: BM + (aT ? 0 : pad(vA)), BS: BN + (bT ? pad(vB) : 0) };
}

/**
 * The workgroup arrays of a product's two slabs, As [k][m] and Bs [k][n], as arrays of BK rows of
 * `cols` (vec4s where read as vec4s). Two-dimensional so that bounds checks (WebGPU clamps every
 * dynamic index) clamp k and the column apart: in the inner loop k is a constant once unrolled and
 * the column's clamp does not depend on k, so neither costs an instruction per read, where one flat
 * index needed a clamp per read.
 */
function slabArrays(form, tile) {
  const { BK, KG } = tileShape(tile), { vA, vB, AS, BS } = slabGeometry(form, tile);
  return [{ name: "As", type: vA ? "vec4f" : "f32", rows: BK, cols: AS / (vA ? 4 : 1), groups: KG },
    { name: "Bs", type: vB ? "vec4f" : "f32", rows: BK, cols: BS / (vB ? 4 : 1), groups: KG }];
}
// with sliced K, one more dimension in front: the group's BK/KG rows (its index, lid.z, is the same
// for every read of the inner loop, so its bounds check is too)
const declareSlab = ({ name, type, rows, cols, groups }) => (groups > 1
  ? `var<workgroup> ${name}: array<array<array<${type}, ${cols}>, ${rows / groups}>, ${groups}>;`
  : `var<workgroup> ${name}: array<array<${type}, ${cols}>, ${rows}>;`);
const slabFloats = ({ type, rows, cols }) => rows * cols * (type === "f32" ? 1 : 4);

/**
 * Bytes of workgroup memory a product's kernel declares (prologue: with the LayerNorm or
 * cross-entropy prologue's, a float per invocation and two per row of the tile either way).
 */
export function workgroupBytes(form, tile, prologue = false) {
  const { threads, BM } = tileShape(tile);
  return 4 * (slabArrays(form, tile).reduce((n, x) => n + slabFloats(x), 0) + (prologue ? threads + 2 * BM : 0));
}

/**
 * Sliced K's end (after the K loop's last barrier, so the slabs are free): groups 1…KG-1 put their
 * sums (the TM·TN accumulators, and with aT the TM bias-gradient sums) in the slabs' memory, as many
 * groups per round as fit, and group 0 adds them, group by group in order, so every output is the
 * same sum on every run. Each sum of a group takes a block of WX·WY floats (invocation t at float t:
 * a warp's accesses are contiguous), the blocks laid in As and then in Bs.
 */
function sliceSums(form, tile) {
  const { WX, WY, KG, TM, TN } = tileShape(tile);
  const arrays = slabArrays(form, tile), KB = arrays[0].rows / KG, gt = WX * WY;
  const sums = [...range(TM).flatMap((i) => range(TN).map((j) => `c${i}_${j}`)), ...(formOf(form).aT ? range(TM).map((i) => `s${i}`) : [])];
  const blocksA = Math.floor(slabFloats(arrays[0]) / gt);
  const slots = Math.min(KG - 1, Math.floor((blocksA + Math.floor(slabFloats(arrays[1]) / gt)) / sums.length));
  if (slots < 1) throw new Error(`tile ${tile}: the slabs cannot hold a group's ${sums.length} sums`);
  // float t of block b: its (group, row, column[, component]) reference
  const at = (b) => {
    const { name, type, cols } = arrays[b < blocksA ? 0 : 1], f = `${(b < blocksA ? b : b - blocksA) * gt}u + t`;
    const e = type === "f32" ? `(${f})` : `((${f}) / 4u)`, row = `(${e} / ${cols}u)`;
    return `${name}[${row} / ${KB}u][${row} % ${KB}u][${e} % ${cols}u]${type === "f32" ? "" : `[(${f}) % 4u]`}`;
  };
  const rounds = [];
  for (let first = 1; first < KG; first += slots) {
    const last = Math.min(KG, first + slots);
    rounds.push(/* wgsl */ `
${range(last - first).map((z) => `  if (lid.z == ${first + z}u) {\n${sums.map((v, q) => `    ${at(z * sums.length + q)} = ${v};`).join("\n")}\n  }`).join("\n")}
  workgroupBarrier();
  if (lid.z == 0u) {
${range(last - first).flatMap((z) => sums.map((v, q) => `    ${v} = ${v} + ${at(z * sums.length + q)};`)).join("\n")}
  }${last < KG ? "\n  workgroupBarrier();" : ""}`);
  }
  return `\n  let t = lid.y * ${WX}u + lid.x; // this invocation within its group${rounds.join("")}`;
}

/**
 * One product as WGSL: its workgroup memory, loads, store and `fn product<s>(wid, lid, li)` computing
 * the tile of workgroup wid. s suffixes every name (uniform fields, functions, workgroup arrays) so
 * that two products can share a shader; buffers: the binding name of each of A, B, bias, R, C, G, or
 * null where this product never uses it (its epilogue then has no such step).
 * vec: A and B are bound as array<vec4f> and read 4 floats at a time along their contiguous axis
 * (vecAligned says when a product allows it): a quarter of the load instructions and index sums.
 * shared: the workgroup arrays are declared by the caller (slabArrays), as As and Bs, unsuffixed.
 * ln: K, A's row length, where A is normalised as it is loaded (LN_UNIFORMS). slabOff (split): a
 * WGSL expression, where in C's binding the slabs start (by default where the binding does).
 * ce: K, A's row length, where A (logits) becomes cross-entropy's gradient as it is loaded (CE_UNIFORMS).
 */
function productBody(form, tile, split, kcat, s, buffers, vec = false, shared = null, ln = false, slabOff = null, ce = false) {
  const { WX, WY, BM, BN, BK, TM, TN, KG, threads } = tileShape(tile);
  const KB = BK / KG; // slab rows per group
  if (ln && (form !== "forward" || split || kcat)) throw new Error("a LayerNorm prologue belongs to an unsplit forward product");
  if (ce && (form !== "backward_input" || split || kcat)) throw new Error("a cross-entropy prologue belongs to an unsplit input-gradient product");
  const { aT, bT } = formOf(form);
  const { vA, vB } = slabGeometry(form, tile);
  const vOut = outputsAsVec4(tile, vec);
  const cAt = (x) => (vOut ? `C[(${x}) / 4u][(${x}) % 4u]` : `C[${x}]`); // one float of C, however C is bound
  const rowOf = (i) => (vA ? `lid.y * 4u + ${Math.floor(i / 4) * WY * 4 + (i % 4)}u` : `lid.y + ${i * WY}u`);
  const colOf = (j) => (vB ? `lid.x * 4u + ${Math.floor(j / 4) * WX * 4 + (j % 4)}u` : `lid.x + ${j * WX}u`);
  // workgroup-memory element (k, m) of A's slab and (k, n) of B's, as an assignable reference; where
  // a slab is read as vec4s, vecA/vecB is the vec4 that holds it
  const row = (X, k) => (KG > 1 ? `${X}[(${k}) / ${KB}u][(${k}) % ${KB}u]` : `${X}[${k}]`);
  const vecA = (k, m) => `${row("As", k)}[(${m}) / 4u]`, vecB = (k, n) => `${row("Bs", k)}[(${n}) / 4u]`;
  const atA = (k, m) => (vA ? `${vecA(k, m)}[(${m}) % 4u]` : `${row("As", k)}[${m}]`);
  const atB = (k, n) => (vB ? `${vecB(k, n)}[(${n}) % 4u]` : `${row("Bs", k)}[${n}]`);
  // the inner loop's slab row k of this invocation's group
  const innerA = KG > 1 ? "As[lid.z][k]" : "As[k]", innerB = KG > 1 ? "Bs[lid.z][k]" : "Bs[k]";
  // one k-row of the group's slab rows: TM·TN FMAs (and the bias-gradient sums)
  const kRow = /* wgsl */ `
${vA ? range(TM / 4).map((g) => `      let av${g} = ${innerA}[lid.y + ${g * WY}u];`).join("\n") : ""}
${vB ? range(TN / 4).map((g) => `      let bv${g} = ${innerB}[lid.x + ${g * WX}u];`).join("\n") : ""}
${range(TM).map((i) => `      let a${i} = ${vA ? `av${Math.floor(i / 4)}[${i % 4}]` : `${innerA}[lid.y + ${i * WY}u]`};`).join("\n")}
${range(TN).map((j) => `      let b${j} = ${vB ? `bv${Math.floor(j / 4)}[${j % 4}]` : `${innerB}[lid.x + ${j * WX}u]`};`).join("\n")}
${each(TM, TN, (i, j) => /* wgsl */ `      c${i}_${j} = c${i}_${j} + a${i} * b${j};`)}
      if (bias_grad) {
${range(TM).map((i) => /* wgsl */ `        s${i} = s${i} + a${i};`).join("\n")}
      }`;
  // The loop over those rows, unrolled here: the NVIDIA Vulkan driver left 32-deep ones rolled, and
  // unrolled they ran faster on every tile measured, the deep ones most (see
  // docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §16).
  const inner = range(KB).map((k) => `    {${kRow.replace(/\[k\]/g, `[${k}u]`)}\n    }`).join("\n");
  // Each invocation loads L vec4s (or scalars) of each slab per K-step; a guard where the slab does
  // not divide evenly among the invocations.
  const W = vec ? 4 : 1;
  const slabA = (BK * BM) / W, slabB = (BK * BN) / W;
  const LA = Math.ceil(slabA / threads), LB = Math.ceil(slabB / threads);
  if (slabA % Math.min(slabA, threads) || slabB % Math.min(slabB, threads)) throw new Error(`tile ${tile}: slab not divisible among ${threads} invocations`);
  // per loaded element e: its slab coordinates (and which W of them it covers)
  const aCoord = aT ? `let kk = e / ${BM / W}u; let mm = e % ${BM / W}u * ${W}u;` : `let mm = e / ${BK / W}u; let kk = e % ${BK / W}u * ${W}u;`;
  const bCoord = bT ? `let nn = e / ${BK / W}u; let kb = e % ${BK / W}u * ${W}u;` : `let kb = e / ${BN / W}u; let nn = e % ${BN / W}u * ${W}u;`;
  const guard = (slab, r) => ((r + 1) * threads > slab ? `if (e < ${slab}u) ` : "");
  const fetch = (k0) => [
    ...range(LA).map((r) => `    { let e = li + ${r * threads}u; ${aCoord} ${guard(slabA, r)}{ ra${r} = load_a(a_base, m0 + mm, ${k0} + kk); } }`),
    ...range(LB).map((r) => `    { let e = li + ${r * threads}u; ${bCoord} ${guard(slabB, r)}{ rb${r} = load_b(b_base, ${k0} + kb, n0 + nn); } }`),
  ].join("\n");
  // a vec4 loaded along m (aT) or n (!bT) lands in one row of the slab: one vec4 store where that
  // row is read as vec4s
  const stashA = (r) => !vec ? `${atA("kk", "mm")} = ra${r};`
    : aT ? (vA ? `${vecA("kk", "mm")} = ra${r};` : range(4).map((c) => `${atA("kk", `mm + ${c}u`)} = ra${r}[${c}];`).join(" "))
      : range(4).map((c) => `${atA(`kk + ${c}u`, "mm")} = ra${r}[${c}];`).join(" ");
  const stashB = (r) => !vec ? `${atB("kb", "nn")} = rb${r};`
    : !bT ? (vB ? `${vecB("kb", "nn")} = rb${r};` : range(4).map((c) => `${atB("kb", `nn + ${c}u`)} = rb${r}[${c}];`).join(" "))
      : range(4).map((c) => `${atB(`kb + ${c}u`, "nn")} = rb${r}[${c}];`).join(" ");
  const stash = [
    ...range(LA).map((r) => `    { let e = li + ${r * threads}u; ${aCoord} ${guard(slabA, r)}{ ${stashA(r)} } }`),
    ...range(LB).map((r) => `    { let e = li + ${r * threads}u; ${bCoord} ${guard(slabB, r)}{ ${stashB(r)} } }`),
  ].join("\n");
  // k: index into the (concatenated) K range; kcat picks the product it belongs to
  const kSplit = (k) => kcat ? /* wgsl */ `let kz = ${k} / p.K; let kr = ${k} - kz * p.K;` : /* wgsl */ `let kz = 0u; let kr = ${k};`;
  const has = (b) => buffers[b] !== null;
  // The epilogue: bias, accumulate, residual, the GELU forms. With vOut, on 4 outputs of a row at
  // once (vec4 loads and stores of C, R and G: a quarter of the instructions, and each store writes
  // whole 16-byte runs); each output is the same sum in the same order either way.
  const ep = vOut ? { T: "vec4f", at: (i) => `(${i}) / 4u`, map: (f, x) => `vec4f(${f}(${x}.x), ${f}(${x}.y), ${f}(${x}.z), ${f}(${x}.w))`,
    bias: "let o = bias_base + n; v = v + vec4f(bias[o], bias[o + 1u], bias[o + 2u], bias[o + 3u]);" }
    : { T: "f32", at: (i) => i, map: (f, x) => `${f}(${x})`, bias: "v = v + bias[bias_base + n];" };
  const epilogue = [
    has("bias") && /* wgsl */ `if ((p.flags & 1u) != 0u) { ${ep.bias} }`,
    /* wgsl */ `if ((p.flags & 2u) != 0u) { v = v + C[idx]; }`,
    has("R") && /* wgsl */ `if ((p.flags & 4u) != 0u) { v = v + R[${ep.at("p.r_off + m * p.N + n")}]; }`,
    has("R") && /* wgsl */ `if ((p.flags & 32u) != 0u) { let h = R[${ep.at("p.r_off + m * p.N + n")}]; v = v * ${ep.map("gelu_grad", "h")}; }`,
    /* wgsl */ `C[idx] = v;`,
    has("G") && /* wgsl */ `if ((p.flags & 16u) != 0u) { G[idx] = ${ep.map("gelu", "v")}; }`,
  ].filter(Boolean).join("\n  ");
  const T = vec ? "vec4f" : "f32", zero = vec ? "vec4f(0.0)" : "0.0";
  const at = (i) => (vec ? `(${i}) / 4u` : i); // an element index as an index into A, B or LN
  // with vec, (m, k) starts a run of 4 along the contiguous axis, all in range when m (or k) is;
  // A is loaded at (m, k), B at (k, n); index: the element's offset in its (batch's) operand
  const load = (X, index) => /* wgsl */ `
fn load_${X.toLowerCase()}(base: u32, ${X === "A" ? "m: u32, k: u32" : "k: u32, n: u32"}) -> ${T} {
  if (${X === "A" ? "m >= p.M || k >= p.K * p.kcat" : "k >= p.K * p.kcat || n >= p.N"}) { return ${zero}; }
  ${kSplit("k")}
  return ${X}[${at(`base + kz * p.${X.toLowerCase()}_zs + ${index}`)}];
}`;
  // forward's A (m, k), normalised with its row's statistics (row m % BM of the tile); the first
  // column tile also stores it for the backward
  const loadNormalised = /* wgsl */ `
fn load_a(base: u32, m: u32, k: u32) -> ${T} {
  if (m >= p.M || k >= p.K) { return ${zero}; }
  let i = base + m * p.K + k;
  let stats = ln_stats[m % BM];
  let y = (A[${at("i")}] - stats.x) * stats.y * B[${at("p.ln_w_off + k")}] + B[${at("p.ln_b_off + k")}];
  if (prologue_writer) { LN[${at("i")}] = y; }
  return y;
}`;
  // cross-entropy's gradient of A (m, k) from its row's log-sum-exp and target; the first column tile
  // also stores it for the deferred weight gradient
  const onehot = vec ? "vec4f(select(0.0, 1.0, k == t), select(0.0, 1.0, k + 1u == t), select(0.0, 1.0, k + 2u == t), select(0.0, 1.0, k + 3u == t))"
    : "select(0.0, 1.0, k == t)";
  const loadGradient = /* wgsl */ `
fn load_a(base: u32, m: u32, k: u32) -> ${T} {
  if (m >= p.M || k >= p.K) { return ${zero}; }
  let i = base + m * p.K + k;
  let t = ce_target[m % BM];
  let y = (exp(A[${at("i")}] - ce_lse[m % BM]) - ${onehot}) * p.ce_scale;
  if (prologue_writer) { DL[${at("i")}] = y; }
  return y;
}`;
  // the prologues: LANES invocations per row of the tile, each taking a strided part of the row
  // (c ascending, as a loop would), unrolled over the row's K = ln (or ce) columns up to
  // LN_UNROLLED steps (medium's take 8; a decode step's row of 1280 would take 80, as many loads in
  // registers)
  const rowLength = ln || ce, stride = (threads / BM) * W, steps = Math.ceil(rowLength / stride);
  const rowSum = (term) => (steps > LN_UNROLLED
    ? /* wgsl */ `for (var c = lane * ${W}u; c < ${rowLength}u; c += ${stride}u) { ${term} }`
    : range(steps).map((j) => {
      const c = `lane * ${W}u + ${j * stride}u`, partial = (j + 1) * stride > rowLength;
      return `{ let c = ${c}; ${partial ? `if (c < ${rowLength}u) ` : ""}{ ${term} } }`;
    }).join("\n    "));
  // every lane of row r combines the row's LANES partials, in lane order, into `total` (after a
  // barrier that lets the lanes finish reading the previous partials, where there were some)
  const acrossLanes = (partial, total, init, combine, after = true) => /* wgsl */ `${after ? `workgroupBarrier();
    ` : ""}row_part[li] = ${partial};
    workgroupBarrier();
    var ${total} = ${init};
    for (var l = 0u; l < LANES; l++) { ${total} = ${combine(total, "row_part[r * LANES + l]")}; }`;
  const add = (a, b) => `${a} + ${b}`, max = (a, b) => `max(${a}, ${b})`;
  // a prologue's frame: lane `lane` of row r of the tile, its row's start in A; the first column tile writes
  const prologue = (statistics) => /* wgsl */ `
  prologue_writer = wid.x == 0u && wid.z == 0u;
  {
    let r = li / LANES;
    let lane = li % LANES;
    let row = a_base + min(m0 + r, p.M - 1u) * p.K; // rows past M: a stand-in, never stored
    ${statistics}
    workgroupBarrier();
  }`;
  const lnPrologue = prologue(/* wgsl */ `var s = 0.0;
    ${rowSum(vec ? "let x = A[(row + c) / 4u]; s = s + (x.x + x.y) + (x.z + x.w);" : "s = s + A[row + c];")}
    ${acrossLanes("s", "total", "0.0", add, false)}
    let mean = total / f32(p.K);
    var q = 0.0;
    ${rowSum(vec ? "let d = A[(row + c) / 4u] - mean; q = q + (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);" : "let d = A[row + c] - mean; q = q + d * d;")}
    ${acrossLanes("q", "squares", "0.0", add)}
    let rstd = 1.0 / sqrt(squares / f32(p.K) + p.ln_eps);
    if (lane == 0u) {
      ln_stats[r] = vec2f(mean, rstd);
      if (prologue_writer && m0 + r < p.M) {
        LNS[p.ln_stats_off + 2u * (m0 + r)] = mean;
        LNS[p.ln_stats_off + 2u * (m0 + r) + 1u] = rstd;
      }
    }`);
  const cePrologue = prologue(/* wgsl */ `var mx = -3.0e38;
    ${rowSum(vec ? "let x = A[(row + c) / 4u]; mx = max(mx, max(max(x.x, x.y), max(x.z, x.w)));" : "mx = max(mx, A[row + c]);")}
    ${acrossLanes("mx", "m", "-3.0e38", max, false)}
    var e = 0.0;
    ${rowSum(vec ? "let x = exp(A[(row + c) / 4u] - m); e = e + (x.x + x.y) + (x.z + x.w);" : "e = e + exp(A[row + c] - m);")}
    ${acrossLanes("e", "total", "0.0", add)}
    let lse = m + log(total);
    if (lane == 0u) {
      let t = targets[min(m0 + r, p.M - 1u)];
      ce_lse[r] = lse;
      ce_target[r] = t;
      if (prologue_writer && m0 + r < p.M) { losses[m0 + r] = lse - A[${vec ? "(row + t) / 4u][(row + t) % 4u" : "row + t"}]; }
    }`);
  const body = /* wgsl */ `
const BM = ${BM}u; const BN = ${BN}u; const BK = ${BK}u;
${shared ? "" : slabArrays(form, tile).map(declareSlab).join("\n")}
${ln || ce ? /* wgsl */ `const LANES = ${threads / BM}u;
var<workgroup> row_part: array<f32, ${threads}>;
var<private> prologue_writer: bool;` : ""}
${ln ? /* wgsl */ `var<workgroup> ln_stats: array<vec2f, ${BM}>; // (mean, rstd) of the tile's rows
${loadNormalised}` : ce ? /* wgsl */ `var<workgroup> ce_lse: array<f32, ${BM}>; // log-sum-exp of the tile's rows
var<workgroup> ce_target: array<u32, ${BM}>;
${loadGradient}` : load("A", aT ? "kr * p.M + m" : "m * p.K + kr")}
${load("B", bT ? "n * p.K + kr" : "kr * p.N + n")}

// slab: this workgroup's output base (its batch's C, or its split's partial slab); with vOut, n is
// the first of 4 columns (N is a multiple of 4, so all 4 are in range or none)
fn store(slab: u32, bias_base: u32, m: u32, n: u32, acc: ${ep.T}) {
  if (m >= p.M || n >= p.N) { return; }
  let idx = ${ep.at("slab + m * p.N + n")};
  ${split ? "C[idx] = acc;" : `var v = acc;\n  ${epilogue}`}
}

fn product(wid: vec3u, lid: vec3u, li: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let batch = wid.z / p.splits;
  let a_base = p.a_off + ${kcat ? "0u" : "batch * p.a_zs"};
  let b_base = p.b_off + ${kcat ? "0u" : "batch * p.b_zs"};${ln ? lnPrologue : ce ? cePrologue : ""}
  // the TM×TN accumulators and the prefetch registers are unrolled into scalars so that every
  // backend keeps them in registers
${each(TM, TN, (i, j) => /* wgsl */ `  var c${i}_${j} = 0.0;`)}
${range(TM).map((i) => /* wgsl */ `  var s${i} = 0.0; // Σ_k A[k, row i] for the fused bias gradient`).join("\n")}
${range(LA).map((r) => /* wgsl */ `  var ra${r} = ${zero};`).join("\n")}
${range(LB).map((r) => /* wgsl */ `  var rb${r} = ${zero};`).join("\n")}
  let bias_grad = ${aT ? "(p.flags & 8u) != 0u && wid.x == 0u" : "false"};
  let k_total = p.K * p.kcat;
  let k_begin = (wid.z % p.splits) * p.k_chunk;
  let k_end = min(k_total, k_begin + p.k_chunk); // k_chunk is a multiple of BK
  {
${fetch("k_begin")}
  }
  for (var k0 = k_begin; k0 < k_end; k0 += BK) {
${stash}
    workgroupBarrier();
    if (k0 + BK < k_end) {
${fetch("(k0 + BK)")}
    }
${inner}
    workgroupBarrier();
  }${KG > 1 ? sliceSums(form, tile) : ""}
  let slab = ${split ? `${slabOff ? `${slabOff} + ` : ""}wid.z * p.len` : "p.c_off + batch * p.c_zs"};
  let bias_base = p.bias_off + batch * p.bias_zs;${KG > 1 ? "\n  if (lid.z != 0u) { return; }" : ""}
${vOut ? each(TM, TN / 4, (i, g) => /* wgsl */ `  store(slab, bias_base, m0 + ${rowOf(i)}, n0 + ${colOf(4 * g)}, vec4f(${range(4).map((c) => `c${i}_${4 * g + c}`).join(", ")}));`)
    : each(TM, TN, (i, j) => /* wgsl */ `  store(slab, bias_base, m0 + ${rowOf(i)}, n0 + ${colOf(j)}, c${i}_${j});`)}
  if (bias_grad && lid.x == 0u) {
${range(TM).map((i) => /* wgsl */ `    if (m0 + ${rowOf(i)} < p.M) { ${cAt(`slab + p.M * p.N + m0 + ${rowOf(i)}`)} = s${i}; }`).join("\n")}
  }
}
`;
  // suffix the names; map the buffer names to their bindings
  return body
    .replace(/\bp\.(\w+)/g, (_, f) => `p.${f}${s}`)
    .replace(shared ? /\b(BM|BN|BK|load_a|load_b|store|product)\b/g
      : /\b(BM|BN|BK|As|Bs|load_a|load_b|store|product)\b/g, (name) => `${name}${s}`)
    .replace(/\b(A|B|bias|R|C|G|LN|LNS|DL|targets|losses)\[/g, (_, b) => `${buffers[b]}[`);
}

/**
 * Whether a product may read A and B as vec4s: every run of 4 along their contiguous axes lies
 * inside one row and starts at a multiple of 4 floats (offsets and strides in floats); on a tile
 * that stores 4 outputs at a time (storesVec4), C (or its split slabs, len floats apart) and R must
 * take runs of 4 outputs of a row too. tile null: a kernel that stores its outputs one by one (matvec.js).
 */
export function vecAligned(form, tile, { M, N, K, aOff = 0, bOff = 0, cOff = 0, rOff = 0, len = 0, strides = {} }) {
  const { aT, bT } = formOf(form);
  const outputs = tile && storesVec4(tile) ? [N, cOff, rOff, len, strides.c ?? 0] : [];
  return [aT ? M : K, bT ? K : N, aOff, bOff, strides.a ?? 0, strides.b ?? 0, ...outputs].every((x) => x % 4 === 0);
}

/** Whether a tile's invocations own runs of 4 columns, which its vec variant loads and stores as vec4s. */
export const storesVec4 = (tile) => slabGeometry("forward", tile).vB;
const outputsAsVec4 = (tile, vec) => vec && storesVec4(tile);

const ALL_BUFFERS = Object.fromEntries([...MATMUL_BUFFERS, ...LN_BUFFERS, ...CE_BUFFERS].map(([b]) => [b, b]));
// the cross-entropy prologue's product binds no bias, residual or GELU output: with its three
// buffers, six in all, within WebGPU's default eight
const CE_PRODUCT_BUFFERS = MATMUL_BUFFERS.filter(([b]) => ["A", "B", "C"].includes(b));

// A and B bound as array<vec4f> in the vec variants
export const vecBuffers = (buffers, vec, read4) => buffers.map(([n, mode, type]) => (vec && read4.includes(n) ? [n, mode, "vec4f"] : [n, mode, type]));

/**
 * ln: K, with the LayerNorm prologue over rows of K (forward only; LN_UNIFORMS), or false.
 * ce: K, with the cross-entropy prologue over rows of K logits (backward_input only; CE_UNIFORMS), or false.
 */
export function matmulKernel(form, tile, split = false, kcat = false, vec = false, ln = false, ce = false) {
  for (const [name, K] of [["ln", ln], ["ce", ce]]) {
    if (K !== false && !(Number.isInteger(K) && K > 0)) throw new Error(`matmulKernel ${name}: a row length K, or false (got ${K})`);
  }
  if (ln && ce) throw new Error("matmulKernel: one prologue, ln or ce");
  const { WX, WY, KG } = tileShape(tile);
  const entryPoint = `matmul_${form}`;
  const buffers = ce ? [...CE_PRODUCT_BUFFERS, ...CE_BUFFERS] : [...MATMUL_BUFFERS, ...(ln ? LN_BUFFERS : [])];
  const names = ce ? { ...ALL_BUFFERS, bias: null, R: null, G: null } : ALL_BUFFERS;
  return kernel(`${entryPoint}_${tile}${split ? "_split" : ""}${kcat ? "_kcat" : ""}${vec ? "_vec4" : ""}${ln ? `_ln${ln}` : ""}${ce ? `_ce${ce}` : ""}`,
    [...MATMUL_UNIFORMS.map((f) => [f, "u32"]), ...(ln ? LN_UNIFORMS : []), ...(ce ? CE_UNIFORMS : [])],
    vecBuffers(buffers, vec, ["A", "B", "LN", "DL", ...(outputsAsVec4(tile, vec) ? ["C", "R", "G"] : [])]),
    /* wgsl */ `${GELU_FNS}${productBody(form, tile, split, kcat, "", names, vec, null, ln, null, ce)}
@compute @workgroup_size(${WX}, ${WY}, ${KG})
fn ${entryPoint}(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(local_invocation_index) li: u32) {
  product(wid, lid, li);
}
`, entryPoint);
}

/**
 * How a pair's two products lay out their workgroup arrays: `shared` (one set sized for the larger,
 * as a workgroup computes one of the two products; possible where both slabs have the same element
 * types and K-slice count) or one set each; and the bytes that takes.
 */
export function pairSlabs(first, second) {
  const [a0, a1] = [first, second].map((k) => slabArrays(k.form, k.tile));
  const shared = a0.every((x, i) => x.type === a1[i].type && x.groups === a1[i].groups);
  const merged = shared ? a0.map((x, i) => ({ ...x, rows: Math.max(x.rows, a1[i].rows), cols: Math.max(x.cols, a1[i].cols) })) : null;
  const bytes = (arrays) => 4 * arrays.reduce((n, x) => n + slabFloats(x), 0);
  return { shared, merged, bytes: shared ? bytes(merged) : bytes(a0) + bytes(a1) };
}

// Where several products share a dispatch (a pair, a group), each workgroup of a 1-D grid finds its
// product's tile (x, y, z) from its index w within that product, and each invocation its place in the
// tile's WX×WY×KG layout from its flat index li.
const TILE_OF = /* wgsl */ `
fn tile_of(w: u32, gx: u32, gy: u32) -> vec3u { return vec3u(w % gx, (w / gx) % gy, w / (gx * gy)); }
`;
const invocationOf = ({ WX, WY }) => `vec3u(li % ${WX}u, (li / ${WX}u) % ${WY}u, li / ${WX * WY}u)`;

/**
 * Two products that read the same A in one dispatch: an input gradient dX = dY·W (its GELU epilogue
 * allowed) and the weight gradient dW = dYᵀ·X (split-K or not, bias gradient fused) of one Linear.
 * Neither needs the other, so they need no barrier between them: the first `count0` workgroups (of a
 * 1-D grid) compute the first product, the rest the second. The tiles may differ in shape and in
 * how their invocations are laid out, not in how many there are: the workgroup is one-dimensional
 * and each product reads its own (x, y, K-slice) from the invocation's index. Uniforms: the matmul
 * fields suffixed 0 and 1, count0, and each product's grid width gx and height gy (z: batches ×
 * splits). Bindings: A (shared), B0, R0, C0, B1, C1. vec: both products read A and B as vec4s.
 */
export function matmulPairKernel(first, second, vec = false) {
  const t0 = tileShape(first.tile), t1 = tileShape(second.tile);
  if (t0.threads !== t1.threads) throw new Error(`matmul pair: tiles ${first.tile} and ${second.tile} differ in invocations (${t0.threads}, ${t1.threads})`);
  const name = (k) => `${k.form}_${k.tile}${k.split ? "_split" : ""}${k.kcat ? "_kcat" : ""}`;
  const { shared, merged } = pairSlabs(first, second);
  const arrays = shared ? merged.map(declareSlab).join("\n") : "";
  const body = (k, s) => productBody(k.form, k.tile, k.split, k.kcat, s, { A: "A", B: `B${s}`, bias: null, R: s === "0" ? "R0" : null, C: `C${s}`, G: null }, vec, shared);
  return kernel(`matmul_pair_${name(first)}_${name(second)}${vec ? "_vec4" : ""}`,
    [...["0", "1"].flatMap((s) => MATMUL_UNIFORMS.map((f) => [`${f}${s}`, "u32"])),
      ["count0", "u32"], ["gx0", "u32"], ["gy0", "u32"], ["gx1", "u32"], ["gy1", "u32"]],
    vecBuffers([["A", "read"], ["B0", "read"], ["R0", "read"], ["C0", "rw"], ["B1", "read"], ["C1", "rw"]], vec,
      ["A", "B0", "B1", ...(outputsAsVec4(first.tile, vec) ? ["R0", "C0"] : []), ...(outputsAsVec4(second.tile, vec) ? ["C1"] : [])]),
    /* wgsl */ `${GELU_FNS}${LINEAR_ID}${TILE_OF}${arrays}${body(first, "0")}${body(second, "1")}

@compute @workgroup_size(${t0.threads})
fn matmul_pair(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
        @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  if (w < p.count0) {
    product0(tile_of(w, p.gx0, p.gy0), ${invocationOf(t0)}, li);
  } else {
    product1(tile_of(w - p.count0, p.gx1, p.gy1), ${invocationOf(t1)}, li);
  }
}
`, "matmul_pair");
}

/**
 * Several products on one tile in one dispatch, each with its shapes, offsets and strides compiled in
 * (too many for a dispatch's 256 bytes of uniforms): a step's deferred weight gradients (trainer.js),
 * each batched over the blocks and reading its own dY and X buffers. products: [{form, split, values:
 * the matmul uniforms (_matmulDispatch's), grid: [gx, gy, gz], buffers: {A, B, C} binding names,
 * slabOff: split, the float where its slabs start in C's binding}]; bindings: [[name, mode]] in
 * binding order. The first products[0]'s gx·gy·gz workgroups (of a 1-D grid) compute its tiles, the
 * next the second's, and so on; the workgroup arrays are one set, as every product uses the same tile.
 */
export function matmulGroupKernel(tile, products, bindings, vec = false) {
  const t = tileShape(tile), form = products[0].form;
  if (products.some((k) => k.form !== form)) throw new Error("matmul group: products of one form");
  const bodies = products.map((k, i) => productBody(form, tile, k.split, false, `_${i}`, { A: k.buffers.A, B: k.buffers.B, bias: null, R: null,
    C: k.buffers.C, G: null }, vec, true, false, k.split ? `${k.slabOff}u` : null).replace(new RegExp(`\\bp\\.(\\w+)_${i}\\b`, "g"), (_, f) => {
    if (!Number.isInteger(k.values[f])) throw new Error(`matmul group: product ${i} has no ${f}`);
    return `${k.values[f]}u`;
  }));
  const ends = products.reduce((acc, k) => [...acc, (acc.at(-1) ?? 0) + k.grid[0] * k.grid[1] * k.grid[2]], []);
  const branches = products.map((k, i) => `if (w < ${ends[i]}u) { product_${i}(tile_of(w - ${i ? ends[i - 1] : 0}u, ${k.grid[0]}u, ${k.grid[1]}u), lid, li); }`);
  const code = /* wgsl */ `${LINEAR_ID}${TILE_OF}${slabArrays(form, tile).map(declareSlab).join("\n")}${bodies.join("")}
@compute @workgroup_size(${t.threads})
fn matmul_group(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
        @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  if (w >= p.workgroups) { return; }
  let lid = ${invocationOf(t)};
  ${branches.join(" else ")}
}
`;
  const read4 = bindings.filter(([, mode]) => mode === "read").map(([n]) => n);
  const outputs = outputsAsVec4(tile, vec) ? bindings.filter(([, mode]) => mode === "rw").map(([n]) => n) : [];
  return kernel(`matmul_group_${form}_${tile}${vec ? "_vec4" : ""}_${fnv1a(code)}`, [["workgroups", "u32"]],
    vecBuffers(bindings, vec, [...read4, ...outputs]), code, "matmul_group");
}

/** A 32-bit FNV-1a hash of a string, as 8 hex digits: names a kernel by its generated code. */
function fnv1a(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, "0");
}

/** The most K-splits a product may have (chooseSplits' cap; sumSlabs reads this many at most). */
export const MAX_SPLITS = 16;

/**
 * WGSL: `var v`, the sum over a split-K product's `splits` slabs (len floats apart, the first at
 * src) of element i, slab by slab in order: the one order every final sum takes, here and in the
 * LayerNorms that sum a product's slabs themselves (layernorm.js sumIn). All the loads go out
 * before the first add: a loop of load-then-add waited on each slab's load in turn.
 */
export const sumSlabs = (partials, src, splits, len, i) => /* wgsl */ `var v = 0.0;
  {
    let first = ${src} + ${i};
    ${range(MAX_SPLITS).map((z) => `var slab${z} = 0.0;\n    if (${z}u < ${splits}) { slab${z} = ${partials}[first + ${z}u * ${len}]; }`).join("\n    ")}
    ${range(MAX_SPLITS).map((z) => `if (${z}u < ${splits}) { v = v + slab${z}; }`).join("\n    ")}
  }`;

/**
 * Split-K products whose sums one dispatch finishes together (matmul_split_final, or a LayerNorm
 * dispatch's sums): six, so that the deferred weight gradients' six kinds need one. Their uniforms
 * fit a dispatch's 256 bytes: the final's 60, a LayerNorm's 13 and 36 (SUM_REGION_FIELDS).
 */
export const SPLIT_REGIONS = 6;
/** A region's fields, as its SplitSums entry names them (end: where its elements end, over the dispatch). */
export const REGION_FIELDS = ["end", "src", "len", "N", "splits", "c_off", "c_zs", "bias_off", "r_off", "flags"];
/** The fields a sum with no epilogue reads (a LayerNorm dispatch's sums: plain weight gradients). */
export const SUM_REGION_FIELDS = ["end", "src", "len", "splits", "c_off", "c_zs"];
/** The uniform fields of region r (r_end: its elements end at this global index). */
export const splitRegionFields = (r, fields = REGION_FIELDS) => fields.map((f) => `r${r}_${f}`);

/**
 * WGSL: global element g of a dispatch over up to SPLIT_REGIONS regions, handed to its region's
 * `finish` with its index in the region and args(r) (uniform field expressions); an else-chain with
 * no return inside, so that code after it stays in uniform control flow.
 */
export const splitRegionChain = (g, args) => range(SPLIT_REGIONS).map((r) => /* wgsl */ `if (${g} < p.r${r}_end) {
    finish(${g}${r ? ` - p.r${r - 1}_end` : ""}, ${args(r).join(", ")});
  }`).join(" else ");

// Up to SPLIT_REGIONS products, region r: partials[src ..] (batches·splits slabs of len) ->
// C[c_off + i·c_zs ..][0, len) = Σ_z slab[i·splits + z] (+ bias) (+ C) (+ R) for each batch i, z in
// order; len is M·N, or M·N + M with a fused bias gradient (whose sums get no epilogue: flags are 0
// then, as they are with batches). Region r covers global indices [r-1's end, r's end).
export const matmulSplitFinal = kernel("matmul_split_final",
  range(SPLIT_REGIONS).flatMap((r) => splitRegionFields(r).map((f) => [f, "u32"])),
  [["partials", "read"], ["bias", "read"], ["R", "read"], ["C", "rw"]], /* wgsl */ `${LINEAR_ID}
fn finish(i_all: u32, src: u32, len: u32, N: u32, splits: u32, c_off: u32, c_zs: u32, bias_off: u32, r_off: u32, flags: u32) {
  let batch = i_all / len;
  let i = i_all - batch * len;
  ${sumSlabs("partials", "src + batch * splits * len", "splits", "len", "i")}
  let idx = c_off + batch * c_zs + i;
  if ((flags & 1u) != 0u) { v = v + bias[bias_off + i % N]; }
  if ((flags & 2u) != 0u) { v = v + C[idx]; }
  if ((flags & 4u) != 0u) { v = v + R[r_off + i]; }
  C[idx] = v;
}

@compute @workgroup_size(256)
fn matmul_split_final(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let g = linear_workgroup(wid, nwg) * 256u + li;
  ${splitRegionChain("g", (r) => splitRegionFields(r).slice(1).map((f) => `p.${f}`))}
}
`);

/**
 * The tile of the same output shape and K-step as `tile` whose workgroup has `threads` invocations
 * (it slices K into more or fewer groups), or null: what lets a product pair with one whose tile has
 * that many (matmulPairKernel).
 */
export function tileWithThreads(tile, threads) {
  const t = tileShape(tile);
  const twin = Object.keys(MATMUL_TILES).find((name) => {
    const u = tileShape(name);
    return u.threads === threads && ["WX", "WY", "BK", "TM", "TN"].every((f) => u[f] === t[f]);
  });
  return twin ?? null;
}

/**
 * The tile a software adapter (SwiftShader, llvmpipe) runs in place of `tile`: the same output
 * footprint (so the same grid, split counts and buffers), unsliced, with the fewest invocations,
 * then the shallowest K-step. A CPU runs a workgroup's invocations in turns and pays for each one at
 * every barrier, so on SwiftShader these tiles took a tiny-preset step less than half the GPU tiles'
 * time (see docs/lab/2026-11-26-wgsl-step-subgroups.md §18).
 */
export function softwareTile(tile) {
  const t = tileShape(tile);
  const same = Object.keys(MATMUL_TILES).map((name) => [name, tileShape(name)])
    .filter(([, u]) => u.BM === t.BM && u.BN === t.BN && u.KG === 1);
  same.sort(([, a], [, b]) => a.threads - b.threads || a.BK - b.BK);
  return same[0][0];
}

/** Workgroups of a product on a tile. */
export function tileCount(M, N, tile) {
  const t = tileShape(tile);
  return Math.ceil(M / t.BM) * Math.ceil(N / t.BN);
}

/**
 * The tile for a product (K: the whole, concatenated K), from timing every tile (and split count) on
 * every preset's products on a GPU with its clocks up (bench/webgpu/matmul_tiles.mjs, vec4 reads,
 * two-dimensional slabs; see docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §14–15). These products are too small to fill a big GPU,
 * and what they pay for is each K-step's latency, so: below 250k outputs the 256-invocation 2×2 tile
 * with 32-deep K-steps, or, from K = 512 on, the 32×32 tile with K sliced in two; up to a million
 * outputs 4×4 per invocation with 32-deep steps (64×32 for the forward, 32×64 for input gradients,
 * and for input gradients below 500k outputs the sliced 32×32), except forward products from 290k
 * outputs on, which take 64×64 tiles of 256 invocations, as does everything from a million outputs
 * on; big squares (≥ 512 tiles of 128×128) 128×128, with 16-deep K-steps where workgroupLimit (the
 * device's bytes of workgroup memory) allows. Forward products of 150k to a million outputs with
 * K ≤ 128 (small's and medium's, at most 4 K-steps) take 32x64-k32 instead: in a step (interleaved
 * blocks, ab_steps.mjs) small was faster and medium no slower; at K = 192 (large's) the same rule was
 * slower (see docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §23). Weight
 * gradients (long K = B·T, split along K: chooseSplits) take the sliced 32×32 below 250k outputs,
 * 64×64w from there.
 */
export function chooseTile(form, M, N, K, workgroupLimit = 16384) {
  if (tileCount(M, N, "128x128") >= 512) {
    // 4096³: 16-deep K-steps outran 8-deep ones in every form (the tile bench, see
    // docs/lab/2026-11-26-wgsl-step-subgroups.md §19), so the 16-deep where the device offers the
    // workgroup memory they take
    const deep = workgroupBytes(form, "128x128-k16") <= workgroupLimit;
    return deep ? "128x128-k16" : "128x128";
  }
  const outputs = M * N;
  if (form === "forward" && K <= 128 && outputs >= 150_000 && outputs < 1_000_000) return "32x64-k32";
  if (formOf(form).aT) return outputs >= 250_000 ? "64x64w" : "32x32-s2";
  if (outputs < 250_000) return K >= 512 ? "32x32-s2" : "32x32w-k32";
  if (form === "backward_input" && outputs < 500_000) return "32x32-s2";
  if (outputs >= 1_000_000 || (form === "forward" && outputs >= 290_000)) return "64x64w";
  return form === "forward" ? "64x32-k32" : "32x64-k32";
}

/**
 * How many K-splits a product gets (1 = none; each split keeps ≥ 64 of K): enough to reach ~512
 * workgroups, and with sliced K (weight gradients below 250k outputs) at most 4. More
 * splits than that cost more in slabs to sum than they give in parallelism (large's 192×192 weight
 * gradient was slower with 16 splits than 8, massive's 384×384 with 8 than 4); in a step the sliced
 * tiles capped at 4 splits were faster than at 8 or even, and capped at 2 small and medium lost (see
 * docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §27). batches: products of that shape in the
 * dispatch, whose tiles count toward the ~512; workgroups: another target than 512.
 */
export function chooseSplits(M, N, K, tile, batches = 1, workgroups = 512) {
  const { threads, KG } = tileShape(tile), cap = threads >= 256 && KG === 1 ? MAX_SPLITS : 4;
  return Math.max(1, Math.min(cap, Math.floor(K / 64), Math.ceil(workgroups / (batches * tileCount(M, N, tile)))));
}

/**
 * The tile and K-splits of a forward or input-gradient product whose result goes straight into a
 * LayerNorm dispatch, which sums the split slabs as it reads them (Ops.layernormForward's and
 * layernormBackwardInput's sumIn), so splitting K costs no final-sum dispatch: fc_out's forward and
 * the input gradients of fc_in and of q/k/v (K = 3C–4C onto N = C, few output tiles). From K = 512,
 * one split per 256 of K, at most 4, on 64×64w: split, each such product of large to massive took
 * markedly less time, and huge's input gradient no less with 4 splits than with 3 (the tile bench,
 * slabs unsummed; see docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §16).
 */
export function chooseSummedSplits(form, M, N, K, workgroupLimit = 16384) {
  if (form === "backward_weight" || K < 512) return { tile: chooseTile(form, M, N, K, workgroupLimit), splits: 1 };
  return { tile: "64x64w", splits: Math.min(4, Math.floor(K / 256)) };
}

/** K per split: a multiple of the tile's BK (K: the whole, concatenated K). */
export function splitChunk(K, splits, tile) {
  const BK = MATMUL_TILES[tile].BK;
  return Math.ceil(K / splits / BK) * BK;
}

export function matmulGrid(M, N, tile) {
  const t = tileShape(tile);
  return [Math.ceil(N / t.BN), Math.ceil(M / t.BM)];
}
