// The playground's module Worker for the WebAssembly backend: loads the build that the loader picks
// for this browser and model, trains on the shipped corpus, reports every step, evaluates on the
// validation split, and streams samples. Training never blocks the page: it runs here, and it yields
// to this worker's message queue between bursts of steps so that Stop and Sample are heard.
//
// Messages in:  {type: "train", config, training, steps, evalEvery, evalWindows}
//               {type: "stop"}
//               {type: "sample", prompt, temperature, topK, maxNewTokens, seed}
// Messages out: {type: "loaded", build, reason, threads, paramCount}
//               {type: "step", step, loss, ms}      {type: "eval", step, valLoss}
//               {type: "done", step, stopped}       {type: "text", text}   {type: "sampleDone", tokens}
//               {type: "error", message}
import { loadTinyGPT } from "./wasm_loader.js";

const CORPUS_URL = new URL("../data/tinyshakespeare.txt", import.meta.url);
const BURST_MS = 50;  // steps run back to back for this long before the worker looks at its messages

const instances = new Map();
let corpus = null;
let current = null;      // { tg, model, config } of the last model trained
let runId = 0;           // the training run in progress; a new "train" message starts the next one
let stopRequested = false;

// Runs jobs one at a time (a training burst, a sample): generation and training share the model.
let tail = Promise.resolve();
const exclusive = (fn) => {
  const run = tail.then(fn);
  tail = run.catch(() => {});
  return run;
};
// Lets queued messages run. setTimeout(0) is clamped to 4 ms when nested; a MessageChannel is not.
const yieldToMessages = () => new Promise((resolve) => {
  const { port1, port2 } = new MessageChannel();
  port1.onmessage = () => { port1.close(); resolve(); };
  port2.postMessage(null);
});

async function loadCorpus() {
  if (corpus) return corpus;
  const r = await fetch(CORPUS_URL);
  if (!r.ok) throw new Error(`could not fetch the corpus ${CORPUS_URL.pathname}: HTTP ${r.status}`);
  const bytes = new Uint8Array(await r.arrayBuffer());
  if (bytes.length === 0) throw new Error(`the corpus ${CORPUS_URL.pathname} is empty: nothing to train on`);
  return (corpus = bytes);
}

function release() {
  if (current) current.tg.api.tg_destroy(current.model);
  current = null;
}

async function train({ config, training, steps, evalEvery, evalWindows }) {
  const id = ++runId;
  stopRequested = false;
  const text = await loadCorpus();
  const loaded = await loadTinyGPT(config, { corpusBytes: text.length, instances });
  const { tg } = loaded;
  const { api } = tg;
  await exclusive(() => {
    release();
    const model = api.tg_create(config.nLayer, config.nHead, config.dModel, config.ctx, config.vocabSize,
      config.layerNormEps, config.initStd, config.batch, loaded.threads);
    if (!model) throw tg.failure("creating the model", api.tg_last_error_code());
    current = { tg, model, config };
    tg.check(api.tg_init(model, training.seed), "initialising the weights");
    tg.check(api.tg_set_hyper(model, training.lr, training.beta1, training.beta2, training.eps,
      training.weightDecay, training.gradClip), "setting the hyper-parameters");
    const ptr = tg.copyIn(text);
    try {
      tg.check(api.tg_set_corpus(model, ptr, text.length, training.valFraction), "loading the corpus");
    } finally {
      tg.free(ptr);
    }
    tg.check(api.tg_set_data_state(model, training.seed, 0), "seeding the data stream");
    postMessage({ type: "loaded", build: loaded.build, reason: loaded.reason, threads: loaded.threads,
      paramCount: api.tg_param_count(model) });
  });

  const { model } = current;
  let step = 0;
  const running = () => id === runId && !stopRequested;
  while (step < steps && running()) {
    await exclusive(() => {
      if (!running()) return;
      const burstEnd = performance.now() + BURST_MS;
      do {
        const t0 = performance.now();
        const loss = tg.check(api.tg_train_step(model), `training step ${step + 1}`);
        step++;
        postMessage({ type: "step", step, loss, ms: performance.now() - t0 });
        if (step % evalEvery === 0 || step === steps) {
          postMessage({ type: "eval", step, valLoss: tg.check(api.tg_eval(model, evalWindows), "evaluating") });
        }
      } while (step < steps && performance.now() < burstEnd);
    });
    await yieldToMessages();
  }
  postMessage({ type: "done", step, stopped: step < steps });
}

async function sample({ prompt, temperature, topK, maxNewTokens, seed }) {
  if (!current) throw new Error("there is no model yet: train one first");
  const { tg, model, config } = current;
  const { api } = tg;
  // Byte-level: the prompt's UTF-8 bytes are its tokens; the last ctx bytes are the context. An
  // empty prompt starts from a newline, as a text file's next line would.
  let bytes = new TextEncoder().encode(prompt || "\n");
  if (bytes.length > config.ctx) bytes = bytes.subarray(bytes.length - config.ctx);
  const tokens = Int32Array.from(bytes);
  const ptr = tg.copyIn(new Uint8Array(tokens.buffer));
  try {
    tg.check(api.tg_gen_begin(model, ptr, tokens.length, temperature, topK, seed, 1), "starting generation");
  } finally {
    tg.free(ptr);
  }
  const decoder = new TextDecoder("utf-8");  // stream: a character may span tokens
  let made = 0;
  while (made < maxNewTokens) {
    const burst = [];
    const burstEnd = performance.now() + 30;
    while (made < maxNewTokens && performance.now() < burstEnd) {
      burst.push(tg.check(api.tg_gen_next(model), "generating"));
      made++;
    }
    postMessage({ type: "text", text: decoder.decode(Uint8Array.from(burst), { stream: true }) });
    if (made < maxNewTokens) await yieldToMessages();
  }
  postMessage({ type: "text", text: decoder.decode() });
  return made;
}

self.onmessage = async ({ data: msg }) => {
  try {
    if (msg.type === "stop") stopRequested = true;
    else if (msg.type === "train") await train(msg);
    else if (msg.type === "sample") postMessage({ type: "sampleDone", tokens: await exclusive(() => sample(msg)) });
    else throw new Error(`unknown message type ${msg.type}`);
  } catch (e) {
    postMessage({ type: "error", message: String(e?.message || e) });
  }
};
