// Writes every WGSL kernel variant the trainer can use, one <kernel>_<specialisation>.wgsl file each:
//   node tests/webgpu/hosts/dump_wgsl.mjs [outdir]     (default: build/wgsl, from the repo root)
// The variants: the train and eval plans of a Trainer and the decode plans of a Decoder on it for every preset in
// site/static/presets.json, recorded on a stand-in device (no GPU, no weights) offering 16 and
// 32 KiB of workgroup memory, and every
// specialisation the plans choose between by shape: each matmul form × each tile chooseTile picks
// (for any M, N, K) × vec4 reads or not × split-K or not (where the trainer splits that form on
// that tile) × K-concatenation or not (input gradients) × a LayerNorm prologue (over rows of 128) or
// not (unsplit forward products) × a cross-entropy prologue (over rows of 256) or not (unsplit input
// gradients); a decoded token's one-row products as dot products (matvec.js) and its attention apart
// from q/k/v (attention_decode.js); each LayerNorm lane count, the block-end kernels and the embedding's backward that sums
// the head's slabs; LoRA's; the LayerNorm and attention kernels without subgroups
// and at the subgroup widths of SUBGROUP_DUMP_WIDTHS. These are a GPU's tiles: a software adapter's twins
// (matmul.js softwareTile) are compiled by every test that trains on SwiftShader.
// A source identical to one already written is not written again; the first file's header lists its
// other names. Prints {outdir, files, duplicates}.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { recordingDevice, plansOnlyTrainer } from "../../../bench/webgpu/recording_device.js";
import { Decoder } from "../../../webgpu/decoder.js";
import { MATMUL_FORMS, chooseTile, chooseSummedSplits, matmulKernel, matmulSplitFinal } from "../../../webgpu/kernels/matmul.js";
import { matvecKernel, MAX_UNROLL as MATVEC_MAX_UNROLL } from "../../../webgpu/kernels/matvec.js";
import { attentionDecode, attentionDecodeFits } from "../../../webgpu/kernels/attention_decode.js";
import { LAYERNORM_LANES, layernormRowKernels, layernormBlockEndKernel } from "../../../webgpu/kernels/layernorm.js";
import { embeddingBackwardNormSlabs } from "../../../webgpu/kernels/embedding.js";
import { loraDownKernel, loraGradPartialsKernel, loraGradsSum, loraMergeIntoKernel, loraMerge } from "../../../webgpu/kernels/lora.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const outdir = process.argv[2] ?? `${ROOT}build/wgsl`;

const variants = new Map(); // name -> WGSL
const add = (name, code) => {
  if (variants.has(name) && variants.get(name) !== code) throw new Error(`two different kernels named ${name}`);
  variants.set(name, code);
};

const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
// the plans with WebGPU's default 16 KiB of workgroup memory and with 32 KiB, with which more of a
// Linear's backward products pair (matmulPair); without subgroups and with SUBGROUP_DUMP_WIDTHS'
// none, SwiftShader's, Intel-like adapters' smallest (8, 16), most GPUs' (subgroups.js)
const SUBGROUP_DUMP_WIDTHS = [1, 4, 8, 16, 32];
for (const limit of [16384, 32768]) {
  for (const subgroupWidth of SUBGROUP_DUMP_WIDTHS) {
    for (const preset of Object.keys(presets.presets)) {
      const { device, shaders } = recordingDevice({ limits: { maxComputeWorkgroupStorageSize: limit } });
      const trainer = plansOnlyTrainer(device, configFromPresets(presets, preset), { subgroupWidth });
      const decoder = new Decoder(trainer); // records the decode plans (plansOnlyTrainer has made the train and eval plans)
      await decoder.decodeLogits([0]); // and the decode plan at a position past 0
      await decoder.destroy();
      trainer.destroy();
      for (const [name, code] of shaders) add(name, code);
    }
  }
}
// chooseTile and chooseSummedSplits depend on the product's M, N and K and the device's workgroup
// memory: powers of two up to 2^16, with WebGPU's default 16 KiB and with 32 KiB, reach each of their
// answers
const sizes = Array.from({ length: 17 }, (_, i) => 2 ** i);
const shapes = sizes.flatMap((M) => sizes.flatMap((N) => sizes.flatMap((K) => [16384, 32768].map((limit) => [M, N, K, limit]))));
const answers = (form) => new Set(shapes.map(([M, N, K, limit]) => chooseTile(form, M, N, K, limit)));
// The trainer splits K of every weight gradient (chooseSplits), and of a forward or input-gradient
// product only on chooseSummedSplits' tile; it concatenates K only in q/k/v's input gradient.
const splitTiles = (form) => (form === "backward_weight" ? answers(form)
  : new Set(shapes.map(([M, N, K, limit]) => chooseSummedSplits(form, M, N, K, limit)).filter((c) => c.splits > 1).map((c) => c.tile)));
for (const form of Object.keys(MATMUL_FORMS)) {
  for (const split of [false, true]) {
    for (const tile of split ? splitTiles(form) : answers(form)) {
      for (const kcat of form === "backward_input" ? [false, true] : [false]) {
        for (const vec of [false, true]) {
          // forward products may normalise A on the way in (a LayerNorm prologue, compiled for its
          // rows' length: here medium's 128; the plans above add every preset's own)
          for (const ln of form === "forward" && !split ? [false, 128] : [false]) {
            const k = matmulKernel(form, tile, split, kcat, vec, ln);
            add(k.name, k.code);
          }
          // the tied head's input gradient may take cross-entropy as its prologue, over rows of the
          // byte vocabulary's 256 logits (where the head's weight gradient joins the deferred group)
          if (form === "backward_input" && !split && !kcat) {
            const k = matmulKernel(form, tile, split, kcat, vec, false, 256);
            add(k.name, k.code);
          }
        }
      }
    }
  }
}
// a decoded token's attention apart from its q/k/v product (attention_decode.js), which a plan takes
// where the decode chain (decode_row.js) does not fit: each preset's head size and window
for (const preset of Object.keys(presets.presets)) {
  const { dModel: C, nHead: H, ctx } = presets.presets[preset];
  if (attentionDecodeFits(C / H, ctx)) {
    const k = attentionDecode(C / H, ctx);
    add(k.name, k.code);
  }
}
// a decoded token's products, as dot products, each number of steps a round (the plans above take
// the vec4 ones only, and those their K asks for)
for (const vec of [false, true]) {
  for (const ln of [false, true]) {
    for (let unroll = 1; unroll <= MATVEC_MAX_UNROLL; unroll++) {
      const k = matvecKernel(vec, ln, unroll);
      add(k.name, k.code);
    }
  }
}
add(matmulSplitFinal.name, matmulSplitFinal.code);
// the embedding's backward that sums the head's split-K slabs, which the plans above take only where
// the deferred group with the head's weight gradient splits K and binds 11 storage buffers
add(embeddingBackwardNormSlabs.name, embeddingBackwardNormSlabs.code);
for (const lanes of LAYERNORM_LANES) {
  for (const subgroupWidth of SUBGROUP_DUMP_WIDTHS) {
    const { forward, backwardInput } = layernormRowKernels(lanes, subgroupWidth);
    for (const k of [forward, backwardInput]) add(k.name, k.code);
  }
}
// the block-end kernels, which the plans above (on devices that bind 8 storage buffers) never take
for (const lanes of LAYERNORM_LANES) {
  for (const subgroupWidth of SUBGROUP_DUMP_WIDTHS) {
    for (const sumIn of [false, true]) {
      for (const withSums of [false, true]) {
        const k = layernormBlockEndKernel(lanes, sumIn, withSums, subgroupWidth);
        add(k.name, k.code);
      }
    }
  }
}

// LoRA's kernels (webgpu/lora.js: a fine-tune's step, eval and merges), every variant: 1-3 targets a dispatch
for (const T of [1, 2, 3]) {
  for (const k of [loraDownKernel(T), loraGradPartialsKernel(T), loraMergeIntoKernel(T)]) add(k.name, k.code);
}
for (const k of [loraGradsSum, loraMerge]) add(k.name, k.code);

const byCode = new Map(); // WGSL -> the names that generate it, the first one written
for (const [name, code] of [...variants].sort(([a], [b]) => a.localeCompare(b))) {
  if (!byCode.has(code)) byCode.set(code, []);
  byCode.get(code).push(name);
}
mkdirSync(outdir, { recursive: true });
const files = [], duplicates = {};
for (const [code, [name, ...others]] of byCode) {
  const also = others.length ? `; the same source as ${others.join(", ")}` : "";
  writeFileSync(join(outdir, `${name}.wgsl`), `// ${name}: generated from webgpu/kernels/ by tests/webgpu/hosts/dump_wgsl.mjs${also}\n${code}`);
  files.push(`${name}.wgsl`);
  if (others.length) duplicates[name] = others;
}
console.log(JSON.stringify({ outdir, files, duplicates }));
