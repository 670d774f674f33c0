// The WebAssembly engine of the backend protocol (backend_protocol.md): the C++ core in the build
// that wasm_loader.js picks for this browser and model, behind the engine interface.
import { loadTinyGPT, memoryNeedBytes, detectFeatures, BUILD_MEMORY_LIMIT, RUNTIME_OVERHEAD_BYTES } from "../wasm_loader.js";
import { topBytes } from "../next_byte.js";
import { yieldToMessages } from "../yield_to_messages.js";
import { STEPS_IN_FLIGHT } from "../step_stream.js";
import { checkConfig } from "../../../../webgpu/config_rules.js";

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

export async function createEngine({ model, training, initStd, rules, corpus, seed, state = null, dataState = null }) {
  checkConfig({ model, training, initStd, rules });  // presets.json's rules, before any build loads (the core checks them too)
  const config = loaderConfig({ model, training, initStd });
  const loaded = await loadTinyGPT(config, { corpusBytes: corpus.length, instances });
  const { tg } = loaded;
  const { api } = tg;
  const handle = tg.withStruct("tg_config", config, (ptr) => api.tg_create(ptr, training.batch, loaded.threads));
  if (!handle) throw tg.failure("creating the model", api.tg_last_error_code());
  const withBytes = (bytes, fn) => {
    const ptr = tg.copyIn(bytes);
    try { return fn(ptr); } finally { tg.free(ptr); }
  };
  try {
    tg.check(api.tg_init(handle, seed), "initialising the weights");
    tg.check(api.tg_set_hyper(handle, training.lr, training.beta1, training.beta2, training.eps,
      training.weightDecay, training.gradClip), "setting the hyper-parameters");
    withBytes(corpus, (ptr) => tg.check(api.tg_set_corpus(handle, ptr, corpus.length, training.valFraction), "loading the corpus"));
    if (state) withBytes(state, (ptr) => tg.check(api.tg_import_state(handle, ptr, state.length), "loading the checkpoint's state"));
    const ds = dataState ?? { seed, batchesDrawn: 0 };
    tg.check(api.tg_set_data_state(handle, ds.seed, ds.batchesDrawn), "positioning the data stream");
  } catch (e) {
    api.tg_destroy(handle);
    throw e;
  }

  return {
    kind: "wasm",
    description: `WebAssembly build: ${loaded.build} (${loaded.threads} thread${loaded.threads > 1 ? "s" : ""}). Why: ${loaded.reason}.`,
    paramCount: api.tg_param_count(handle),
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
    },
    async trainStep() {
      return { loss: Promise.resolve(tg.check(api.tg_train_step(handle), `training step ${api.tg_step(handle) + 1}`)) };
    },
    async evaluate() { return tg.check(api.tg_eval(handle, training.evalWindows), "evaluating"); },
    async exportState() {
      const n = api.tg_state_bytes(handle, 1);
      // a view of the arena, copied: the next step overwrites it
      return tg.copyOut(tg.check(api.tg_state_ptr(handle), "reading the state"), n);
    },
    async generate(prompt, { temperature, topK, seed: sampleSeed, maxNewTokens, onToken, signal }) {
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
    destroy() { api.tg_destroy(handle); },
  };
}
