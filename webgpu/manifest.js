// The manifest in JS, the one list of the model's tensors (docs/format.md): names, shapes, order
// (of the .tinygpt state, the init stream and every P-float block) and which ones AdamW decays.
// python_ref/model.py manifest() and wasm/src/model.cpp build_manifest() are the other levels' one
// list each. The WebGPU trainer (through prng.js) and the .tinygpt reader and writer
// (site/static/js/tinygpt_file.js) import this one. No imports: it runs in a worker, a page and Node.

/**
 * Every tensor of the model in manifest order: [{name, shape, offset, numel, decay}], offset counting
 * elements within one P-float block, decay true for the 2-D tensors (embeddings and Linear weights).
 */
export function manifest({ nLayer, dModel: C, ctx, vocabSize: V }) {
  const list = [["token_embedding.weight", [V, C]], ["position_embedding.weight", [ctx, C]]];
  for (let i = 0; i < nLayer; i++) {
    const p = `blocks.${i}.`;
    list.push([p + "ln1.weight", [C]], [p + "ln1.bias", [C]]);
    for (const proj of ["q_proj", "k_proj", "v_proj", "o_proj"]) list.push([p + `attn.${proj}.weight`, [C, C]], [p + `attn.${proj}.bias`, [C]]);
    list.push([p + "ln2.weight", [C]], [p + "ln2.bias", [C]]);
    list.push([p + "mlp.fc_in.weight", [4 * C, C]], [p + "mlp.fc_in.bias", [4 * C]]);
    list.push([p + "mlp.fc_out.weight", [C, 4 * C]], [p + "mlp.fc_out.bias", [C]]);
  }
  list.push(["ln_f.weight", [C]], ["ln_f.bias", [C]]);
  let offset = 0;
  return list.map(([name, shape]) => {
    const numel = shape.reduce((a, b) => a * b, 1);
    const e = { name, shape, offset, numel, decay: shape.length >= 2 };
    offset += numel;
    return e;
  });
}

/** P: the parameter count, VC + ctx·C + 2C + L(12C² + 13C), in Number arithmetic (no 32-bit wrap). */
export function paramCount({ nLayer, dModel: C, ctx, vocabSize: V }) {
  return V * C + ctx * C + 2 * C + nLayer * (12 * C * C + 13 * C);
}
