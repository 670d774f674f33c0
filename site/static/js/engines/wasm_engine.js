// The WebAssembly engine of the backend protocol (backend_protocol.md): the C++ core in the build
// that wasm_loader.js picks for this browser and model, behind the engine interface.
import { loadTinyGPT, memoryNeedBytes, detectFeatures, BUILD_MEMORY_LIMIT, RUNTIME_OVERHEAD_BYTES } from "../wasm_loader.js";
import { topBytes } from "../next_byte.js";
import { yieldToMessages } from "../yield_to_messages.js";
import { STEPS_IN_FLIGHT } from "../step_stream.js";
import { checkConfig } from "../../../../webgpu/config_rules.js";
import { probeWindow } from "../training_stats.js";
import { LORA_TARGETS, targetMask } from "../adapter_file.js";

const GEN_BURST_MS = 30;  // tokens made back to back before the worker looks at its messages

// Instantiated builds, kept for the next model (a module and its thread pool start once a page).
const instances = new Map();


// tg_config's fields by their presets.json keys, and the batch.
const loaderConfig = ({ model, training, initStd }) => ({ ...model, initStd, batch: training.batch });

/** Bytes this model needs in WebAssembly memory, and whether a build here can hold it (and why not). */
export async function requirements({ model, training, initStd }, corpusBytes = 0) {
  const bytes = await memoryNeedBytes(loaderConfig({ model, training, initStd }), corpusBytes);
  const f = await detectFeatures();
  const wide = f.memory64 && f.simd && f.threads;
  const limit = wide ? BUILD_MEMORY_LIMIT.memory64 : BUILD_MEMORY_LIMIT.threads;
  const fits = bytes + RUNTIME_OVERHEAD_BYTES <= limit;
  const gib = (n) => `${(n / 1024 ** 3).toFixed(2)} GiB`;
  const why = wide ? "" : !f.memory64 ? " (this engine has no Memory64)"
    : !f.simd ? " (the Memory64 build needs SIMD)" : ` (the Memory64 build needs threads: ${f.threadsMissing})`;
  return { bytes, fits, where: "WebAssembly",
    reason: fits ? null : `needs ${gib(bytes)}; WebAssembly can address ${gib(limit)} here${why}` };
}

/**
 * The engine interface of backend_protocol.md. LoRA ("LoRA fine-tuning" there): lora {rank, alpha, targets,
 * seed} makes a fine-tune of the base in `state` (tg_create_lora: the base frozen, adapters on the chosen
 * projections): the adapters from their init stream of lora.seed, or from loraState (the adapter state,
 * 4 + 4Q or 4 + 12Q bytes, tg_lora_export_state's layout).
 */
export async function createEngine({ model, training, initStd, rules, corpus, seed, state = null, dataState = null,
  lora = null, loraState = null }) {
  if (loraState && !lora) throw new Error("loraState without lora: say which adapters the state is of");
  if (lora && !state) throw new Error("a LoRA fine-tune needs its base's state");
  checkConfig({ model, training, initStd, rules });  // presets.json's rules, before any build loads (the core checks them too)
  const config = loaderConfig({ model, training, initStd });
  const loaded = await loadTinyGPT(config, { corpusBytes: corpus.length, instances });
  const { tg } = loaded;
  const { api } = tg;
  const handle = lora
    ? tg.withStruct("tg_config", config, (ptr) => tg.withStruct("tg_lora_config", { rank: lora.rank, alpha: lora.alpha,
      targets: targetMask(lora.targets) }, (lp) => api.tg_create_lora(ptr, lp, training.batch, loaded.threads)))
    : tg.withStruct("tg_config", config, (ptr) => api.tg_create(ptr, training.batch, loaded.threads));
  if (!handle) throw tg.failure("creating the model", api.tg_last_error_code());
  const withBytes = (bytes, fn) => {
    const ptr = tg.copyIn(bytes);
    try { return fn(ptr); } finally { tg.free(ptr); }
  };
  try {
    if (!lora) tg.check(api.tg_init(handle, seed), "initialising the weights");
    tg.check(api.tg_set_hyper(handle, training.lr, training.beta1, training.beta2, training.eps,
      training.weightDecay, training.gradClip), "setting the hyper-parameters");
    withBytes(corpus, (ptr) => tg.check(api.tg_set_corpus(handle, ptr, corpus.length, training.valFraction), "loading the corpus"));
    if (state) withBytes(state, (ptr) => tg.check(api.tg_import_state(handle, ptr, state.length), "loading the checkpoint's state"));
    if (lora && loraState) {
      withBytes(loraState, (ptr) => tg.check(api.tg_lora_import_state(handle, ptr, loraState.length), "loading the adapters"));
    } else if (lora) {
      tg.check(api.tg_lora_init(handle, lora.seed), "initialising the adapters");
    }
    const ds = dataState ?? { seed, batchesDrawn: 0 };
    tg.check(api.tg_set_data_state(handle, ds.seed, ds.batchesDrawn), "positioning the data stream");
  } catch (e) {
    api.tg_destroy(handle);
    throw e;
  }

  // tokens after the prompt, streamed to onToken with each one's top next bytes (the logit view)
  async function generateTokens(prompt, { temperature, topK, seed: sampleSeed, maxNewTokens, onToken, signal }) {
    const tokens = new Uint8Array(Int32Array.from(prompt).buffer);
    withBytes(tokens, (ptr) => tg.check(api.tg_gen_begin(handle, ptr, prompt.length, temperature, topK, sampleSeed, 1), "starting generation"));
    let made = 0;
    const V = model.vocabSize, probs = tg.malloc(4 * V);  // each token's next-byte probabilities (logit view)
    if (!probs) throw new Error("out of WebAssembly memory for the next-byte probabilities");
    try {
      while (made < maxNewTokens && !signal?.aborted) {
        const burstEnd = performance.now() + GEN_BURST_MS;
        while (made < maxNewTokens && performance.now() < burstEnd) {
          const token = tg.check(api.tg_gen_next(handle), "generating");
          tg.check(api.tg_gen_last_probs(handle, probs), "reading the next-byte probabilities");
          onToken(token, topBytes(tg.f32(probs, V)));
          made++;
        }
        await yieldToMessages();
      }
    } finally {
      tg.free(probs);
    }
    return made;
  }

  const P = api.tg_param_count(handle);
  // a fine-tune's adapter state: step | adapters | m | v, contiguous in the arena
  const loraStateBytes = (moments) => tg.copyOut(tg.check(api.tg_lora_state_ptr(handle), "reading the adapter state"),
    api.tg_lora_state_bytes(handle, moments ? 1 : 0));
  const baseStateBytes = () => tg.copyOut(tg.check(api.tg_state_ptr(handle), "reading the state"), api.tg_state_bytes(handle, 0));
  const needLoRA = (what) => {
    if (!lora) throw new Error(`${what}: this model is not a LoRA fine-tune`);
  };
  const loraInfo = lora && (() => {
    const tensors = [];
    for (let i = 0; i < api.tg_lora_tensor_count(handle); i++) {
      tensors.push({ name: tg.string(api.tg_lora_tensor_name(handle, i)), offset: api.tg_lora_tensor_offset(handle, i),
        numel: api.tg_lora_tensor_numel(handle, i) });
    }
    const targets = LORA_TARGETS.filter((t) => lora.targets.includes(t));
    return { rank: lora.rank, alpha: lora.alpha, targets, seed: lora.seed, scale: lora.alpha / lora.rank,
      paramCount: api.tg_lora_param_count(handle), tensors };
  })();
  // sampling from the base alone: the adapters off for the generation, on again after it
  const withAdapters = async (on, fn) => {
    const off = lora && !on && api.tg_lora_enabled(handle) === 1;
    if (off) tg.check(api.tg_lora_set_enabled(handle, 0), "turning the adapters off");
    try { return await fn(); } finally { if (off) tg.check(api.tg_lora_set_enabled(handle, 1), "turning the adapters on"); }
  };

  // the training view's buffers in WebAssembly memory, made at the first measured step (never inside one),
  // and its probe window: the first ctx bytes of the corpus trained on
  let measure = null, probe = probeWindow(corpus, model.ctx);
  const measuring = () => {
    if (measure) return measure;
    const count = lora ? api.tg_lora_tensor_count(handle) : api.tg_tensor_count(handle);  // a fine-tune: its adapters
    const names = Array.from({ length: count }, (_, i) => tg.string(lora ? api.tg_lora_tensor_name(handle, i) : api.tg_tensor_name(handle, i)));
    const sums = tg.malloc(8 * 3 * count), entropy = tg.malloc(8 * model.nLayer * model.nHead);
    if (!sums || !entropy) throw new Error("out of WebAssembly memory for the training statistics");
    return (measure = { names, sums, entropy });
  };

  return {
    kind: "wasm",
    description: `WebAssembly build: ${loaded.build} (${loaded.threads} thread${loaded.threads > 1 ? "s" : ""}). Why: ${loaded.reason}.`,
    paramCount: P,
    // a fine-tune's settings and adapter manifest (Q = paramCount), or null
    lora: loraInfo,
    stepsInFlight: STEPS_IN_FLIGHT.wasm,
    get step() { return api.tg_step(handle); },
    dataState: () => ({ seed: api.tg_data_seed(handle), batchesDrawn: api.tg_batches_drawn(handle) }),
    // the learning rate of the next steps (the worker's schedule, lr_schedule.js); the other settings stay
    setLearningRate(lr) {
      tg.check(api.tg_set_hyper(handle, lr, training.beta1, training.beta2, training.eps, training.weightDecay,
        training.gradClip), "setting the learning rate");
    },
    // trains and evaluates on `bytes` from now on; the data stream's position stays where it is
    setCorpus(bytes) {
      withBytes(bytes, (ptr) => tg.check(api.tg_set_corpus(handle, ptr, bytes.length, training.valFraction), "loading the corpus"));
      probe = probeWindow(bytes, model.ctx);
    },
    // stats (true, or {probe}: a window of 1..ctx bytes, by default the corpus's first ctx): the step measured
    // for the training view (tg_train_step_stats), then the attention entropy of the probe (tg_attention_entropy)
    async trainStep({ stats = null } = {}) {
      const what = `training step ${api.tg_step(handle) + 1}`;
      if (!stats) return { loss: Promise.resolve(tg.check(api.tg_train_step(handle), what)) };
      const m = measuring(), window = stats.probe ?? probe;
      const loss = tg.check(api.tg_train_step_stats(handle, m.sums), what);
      const T = window.length;
      withBytes(new Uint8Array(Int32Array.from(window).buffer), (ptr) =>
        tg.check(api.tg_attention_entropy(handle, ptr, T, m.entropy), "measuring the attention entropy"));
      const f64 = (ptr, n) => new Float64Array(tg.copyOut(ptr, 8 * n).buffer);
      return { loss: Promise.resolve(loss), stats: Promise.resolve({ names: m.names, sums: f64(m.sums, 3 * m.names.length),
        entropy: f64(m.entropy, model.nLayer * model.nHead), T }) };
    },
    async evaluate() { return tg.check(api.tg_eval(handle, training.evalWindows), "evaluating"); },
    // a fine-tune: 4 + 4P bytes, the base's step and weights (the merged ones while merged)
    async exportState() {
      if (lora) return baseStateBytes();
      const n = api.tg_state_bytes(handle, 1);
      // a view of the arena, copied: the next step overwrites it
      return tg.copyOut(tg.check(api.tg_state_ptr(handle), "reading the state"), n);
    },
    // LoRA: the adapter state (4 + 12Q bytes with AdamW's moments: exact resume with dataState; 4 + 4Q without)
    async exportLoRAState({ moments = true } = {}) {
      needLoRA("exportLoRAState");
      return loraStateBytes(moments);
    },
    importLoRAState(bytes) {
      needLoRA("importLoRAState");
      withBytes(bytes, (ptr) => tg.check(api.tg_lora_import_state(handle, ptr, bytes.length), "loading the adapters"));
    },
    // the merged model's state (4 + 4P: the base's step | W + (alpha / r)·B·A), the model left as it is: merged
    // in place, read, and the base put back byte for byte (tg_import_state keeps the adapters and their moments)
    async exportMergedState() {
      needLoRA("exportMergedState");
      if (api.tg_lora_merged(handle) === 1) return baseStateBytes();
      const base = baseStateBytes();
      tg.check(api.tg_lora_merge(handle), "merging the adapters");
      try {
        return baseStateBytes();
      } finally {
        withBytes(base, (ptr) => tg.check(api.tg_import_state(handle, ptr, base.length), "restoring the base"));
      }
    },
    mergeLoRA() { needLoRA("mergeLoRA"); tg.check(api.tg_lora_merge(handle), "merging the adapters"); },
    unmergeLoRA() { needLoRA("unmergeLoRA"); tg.check(api.tg_lora_unmerge(handle), "unmerging the adapters"); },
    // the base's weights put back exactly (after an unmerge, which rounds them): 4 + 4P or 4 + 12P bytes
    restoreBase(bytes) {
      needLoRA("restoreBase");
      withBytes(bytes, (ptr) => tg.check(api.tg_import_state(handle, ptr, bytes.length), "restoring the base"));
    },
    get loraMerged() { return lora ? api.tg_lora_merged(handle) === 1 : false; },
    setLoRAEnabled(enabled) { needLoRA("setLoRAEnabled"); tg.check(api.tg_lora_set_enabled(handle, enabled ? 1 : 0), "switching the adapters"); },
    get loraEnabled() { return lora ? api.tg_lora_enabled(handle) === 1 : false; },
    // adapters (a fine-tune): sample with them (default: as they are) or from the base alone (false)
    async generate(prompt, { adapters: on = true, ...options }) {
      return withAdapters(on, () => generateTokens(prompt, options));
    },
    // tokens (1..ctx bytes) -> {T, weights: Float32Array (nLayer, nHead, T, T)} (tg_attention)
    async attention(tokens) {
      const T = tokens.length, n = model.nLayer * model.nHead * T * T;
      const out = tg.malloc(4 * n);
      if (!out) throw new Error(`out of WebAssembly memory for ${n} attention weights`);
      try {
        withBytes(new Uint8Array(Int32Array.from(tokens).buffer), (ptr) => tg.check(api.tg_attention(handle, ptr, T, out), "computing the attention"));
        return { T, weights: tg.f32(out, n).slice() };
      } finally {
        tg.free(out);
      }
    },
    destroy() {
      if (measure) for (const ptr of [measure.sums, measure.entropy]) tg.free(ptr);
      api.tg_destroy(handle);
    },
  };
}
