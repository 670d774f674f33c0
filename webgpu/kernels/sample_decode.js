// A decoded token sampled on the GPU, so that several tokens run in one submit with no round trip to
// the host between them (see docs/lab/2026-11-28-decoding-on-the-gpu.md §38). The rule is docs/determinism.md § Sampling, as
// prng.js's sampleToken: greedy at temperature 0, else the top k (ties to the lower index), then the
// first kept byte whose cumulative probability exceeds u·sum. That rule is float64; WGSL has no f64.
// So the kernel computes it in f32 together with a bound on how far each of its sums can be from
// float64's, and calls its token *certain* only where the threshold lies farther than that bound from
// both edges of the chosen byte's interval. The host takes every certain token and samples the first
// uncertain one itself, in float64, from the logits the kernel copies out. The top-k set needs no
// bound: dividing finite f32 logits by a temperature in [2^-10, 2^20] keeps their order in f64.
//
// Error terms (relative to the sum S of the kept probabilities, n kept):
// - a = (x − m)/T in f32: |a|·3·2^-24; in float64 (x/T − m/T): (|x| + |m|)/T·2^-52.
// - exp(a): WGSL allows 3 + 2|a| ULP; the bound takes 16 + 8|a| ULP (2^-23 each, relative).
// - prefix sums, each a tree of depth 8: 8·2^-24·S; python's sequential cumsum in float64: n·2^-53·S.
//   The error terms are summed in the same scan (a second lane of it), so that their sum costs no
//   barriers of its own; any order bounds them alike.
// - the threshold u·S: u rounded to f32 and the product, 2·2^-24·S; the differences, 2^-24·S each;
//   the margin takes 2^-20·S for them.
// A token is certain where the threshold lies more than twice the sums' bound plus that margin from
// both edges: 2 of the test's 1,600 random rows fall back to the host (tests/webgpu/test_webgpu_sample_decode.py).
import { kernel } from "./kernel.js";

const THREADS = 256;

/** Whether the kernel samples from a vocabulary of V (one logit an invocation). */
export const sampleDecodeFits = (V) => V <= THREADS;

/** The temperatures it serves: 0 (greedy), or where T and every logit / T are normal f32 and f64 values. */
export const sampleDecodeServes = (temperature) => temperature === 0 || (temperature >= 2 ** -10 && temperature <= 2 ** 20);

/** The sampling uniforms of sampleDecode for a temperature it serves and top_k (0: every byte). */
export function sampleDecodeValues(temperature, topK) {
  if (!sampleDecodeServes(temperature)) throw new Error(`sampleDecode: temperature ${temperature} is outside what it serves`);
  return { top_k: topK, greedy: temperature === 0 ? 1 : 0, temperature: temperature === 0 ? 1 : temperature };
}

// Floats per step in the samples buffer: [token, certain (1 or 0), 0, 0, the step's V logits]; the
// first four keep each step's logits 16-byte aligned.
export const sampleRecordFloats = (V) => 4 + V;

export const SAMPLE_DECODE_UNIFORMS = [["V", "u32"], ["top_k", "u32"], ["greedy", "u32"], ["step", "u32"], ["logits_off", "u32"], ["temperature", "f32"]];

/**
 * WGSL (module scope) of sample_logits(li, V, top_k, greedy, temperature, u), which samples a token
 * from the logits in workgroup array `logit4` (vec4s, the lowest f32 past V: the caller fills it
 * and puts a barrier after) and returns (token, certain) to every invocation. Call from uniform
 * control flow.
 */
export const SAMPLE_LOGITS = /* wgsl */ `
const ULP = 1.1920929e-7;        // 2^-23
const F64_ULP4 = 8.881784e-16;   // 2^-50: float64's rounding of a, with room
const NONE = 0xffffffffu;
const LOWEST = -3.40282346e38f;
// the logits 4 at a time (the rank loop's loads), past V the lowest f32 (a logit that low is unusable anyway)
var<workgroup> logit4: array<vec4<f32>, ${THREADS / 4}>;
var<workgroup> scan: array<vec2<f32>, ${2 * THREADS}>; // prefix sums of (probability, its error), two buffers a round
var<workgroup> top: u32;                 // the largest logit's index (the lowest of ties)
var<workgroup> pick: atomic<u32>;        // the first index whose prefix sum exceeds the threshold
var<workgroup> unusable: atomic<u32>;    // 1 where a logit is not finite or past 2^60
var<workgroup> sampled: vec2<u32>;       // (token, certain)

// the prefix sum before index i (0 before the first) in the scan's buffer at src
fn prefix_before(src: u32, i: u32) -> f32 { return select(0.0, scan[src + max(i, 1u) - 1u].x, i > 0u); }

fn sample_logits(li: u32, V: u32, top_k: u32, greedy: u32, temperature: f32, u: f32) -> vec2<u32> {
  let valid = li < V;
  if (li == 0u) { atomicStore(&pick, NONE); atomicStore(&unusable, 0u); }
  let x = logit4[li / 4u][li % 4u];
  // biased exponent past 127 + 60: inf, NaN or |x| ≥ 2^61 (read from the bits: WGSL may assume no NaN)
  workgroupBarrier();
  if (valid && ((bitcast<u32>(x) >> 23u) & 0xffu) > 187u) { atomicStore(&unusable, 1u); }
  // rank: how many logits come before this one in python's stable descending order (a loop of one
  // logit at a time took the dispatch 22 µs on an H200, docs/performance.md §38)
  let xv = vec4<f32>(x);
  let liv = vec4<u32>(li);
  var ranks = vec4<u32>(0u);
  for (var j = 0u; j < ${THREADS / 4}u; j++) {
    let y = logit4[j];
    let at = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
    ranks += select(vec4<u32>(0u), vec4<u32>(1u), (y > xv) | ((y == xv) & (at < liv)));
  }
  let rank = ranks.x + ranks.y + ranks.z + ranks.w;
  if (valid && rank == 0u) { top = li; }
  workgroupBarrier();
  let best = top;
  let m = logit4[best / 4u][best % 4u];
  let kept = valid && (top_k == 0u || rank < top_k);
  var prob = 0.0;
  var err = 0.0;
  if (kept && greedy == 0u) {
    let a = (x - m) / temperature;
    prob = exp(a);
    err = prob * ((16.0 + 8.0 * abs(a)) * ULP + (abs(x) + abs(m)) / temperature * F64_ULP4);
  }
  // inclusive prefix sums of the kept probabilities in byte order
  scan[li] = vec2<f32>(prob, err);
  workgroupBarrier();
  var src = 0u;
  for (var d = 1u; d < ${THREADS}u; d = d << 1u) {
    let dst = ${THREADS}u - src;
    var v = scan[src + li];
    if (li >= d) { v = v + scan[src + li - d]; }
    scan[dst + li] = v;
    src = dst;
    workgroupBarrier();
  }
  let err_sum = scan[src + ${THREADS - 1}u].y;
  let total = scan[src + ${THREADS - 1}u].x;
  let t = u * total;
  let cum = scan[src + li].x;
  let before = prefix_before(src, li);
  if (valid && cum > t && before <= t) { atomicMin(&pick, li); }
  workgroupBarrier();
  let chosen = atomicLoad(&pick);
  if (li == 0u) {
    var token = best;
    var certain = atomicLoad(&unusable) == 0u;
    if (greedy == 0u) {
      let kept_count = select(min(top_k, V), V, top_k == 0u);
      let sum_err = err_sum + total * (0.25 * ULP + f32(kept_count) * F64_ULP4);
      let margin = 2.0 * sum_err + total * (8.0 * ULP);
      certain = certain && chosen < V;
      if (certain) {
        let upper = scan[src + chosen].x;
        let lower = prefix_before(src, chosen);
        certain = upper - t > margin && t - lower > margin;
        token = chosen;
      }
    }
    sampled = vec2<u32>(token, select(0u, 1u, certain));
  }
  return workgroupUniformLoad(&sampled);
}`;

/**
 * WGSL statements (uniform control flow; li in scope, and SAMPLE_LOGITS at module scope) sampling one
 * step from V logits at logitAt(i) (a WGSL f32 expression, i < V; V a WGSL u32 expression): the
 * step's record at `out` of `samples` (its logits, then the token and whether it is certain),
 * storeToken (WGSL statements, invocation 0; none by default) where the next step reads the token, and `picked`
 * (token, certain) left in scope.
 */
export const sampleStep = ({ logitAt, V, out, topK, greedy, temperature, draw, storeToken = "" }) => /* wgsl */ `
  if (li < ${V}) { samples[${out} + 4u + li] = ${logitAt("li")}; }
  if (li < ${THREADS / 4}u) {
    var four = vec4<f32>(LOWEST);
    for (var c = 0u; c < 4u; c++) {
      if (4u * li + c < ${V}) { four[c] = ${logitAt("4u * li + c")}; }
    }
    logit4[li] = four;
  }
  workgroupBarrier();
  let picked = sample_logits(li, ${V}, ${topK}, ${greedy}, ${temperature}, ${draw});
  if (li == 0u) {
    ${storeToken}
    samples[${out}] = f32(picked.x);
    samples[${out} + 1u] = f32(picked.y);
  }`;

// logits: the decoded token's (V) at logits_off; draws: a uniform in [0, 1) per step, as f32;
// tokens: [0] becomes the sampled token, which the next step's embedding reads; samples: step's
// record at step · sampleRecordFloats(V); batch: [step] the token too, so that a batch's tokens can be
// copied into the window the GPU keeps (Decoder._batchCommands), whose restart the host need not see.
export const sampleDecode = kernel("sample_decode", SAMPLE_DECODE_UNIFORMS,
  [["logits", "read"], ["draws", "read"], ["tokens", "rw", "u32"], ["samples", "rw"], ["batch", "rw", "u32"]], /* wgsl */ `${SAMPLE_LOGITS}

@compute @workgroup_size(${THREADS})
fn sample_decode(@builtin(local_invocation_index) li: u32) {
  let V = p.V;
  let out = p.step * (V + 4u);
${sampleStep({ logitAt: (i) => `logits[p.logits_off + ${i}]`, V: "V", out: "out", topK: "p.top_k", greedy: "p.greedy",
    temperature: "p.temperature", draw: "draws[p.step]", storeToken: "tokens[0] = picked.x; batch[p.step] = picked.x;" })}
}
`);
