// LoRA's cost beside full training in one WebAssembly build under Node (bench/cpu/lora.py runs it):
// a full model (tg_create) and a LoRA model (tg_create_lora) of one config, the same base (tg_init
// of the training seed), corpus and data stream; each round times `steps` steps of one, then of the
// other (the order alternates), and each figure is the median of all rounds' steps.
// usage: node [--experimental-wasm-relaxed-simd] lora_node.mjs SPEC.json
//   spec: {build, wasmDir, threads, rounds, steps, config: {tg_config keys, batch}, training: presets.json's,
//          lora: {rank, alpha, targets (tg_lora_config's mask), lr, weightDecay}, corpus: a path}
// Prints {threads, full_ms, lora_ms, full_arena, lora_arena} as JSON.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { instantiateBuild } from "../../site/static/js/wasm_loader.js";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

let result;
try {
  const tg = await instantiateBuild(spec.build, { baseUrl: pathToFileURL(spec.wasmDir.replace(/\/?$/, "/")),
    threads: spec.threads });
  const { api, check } = tg;
  const c = spec.config, t = spec.training, l = spec.lora;
  const full = tg.withStruct("tg_config", c, (cp) => api.tg_create(cp, c.batch, spec.threads));
  const lora = tg.withStruct("tg_config", c, (cp) =>
    tg.withStruct("tg_lora_config", l, (lp) => api.tg_create_lora(cp, lp, c.batch, spec.threads)));
  if (!full || !lora) throw tg.failure("tg_create", api.tg_last_error_code());
  const corpus = new Uint8Array(readFileSync(spec.corpus));
  const ptr = tg.copyIn(corpus);
  for (const [m, lr, decay] of [[full, t.lr, t.weightDecay], [lora, l.lr, l.weightDecay]]) {
    check(api.tg_init(m, t.seed), "tg_init");
    check(api.tg_set_hyper(m, lr, t.beta1, t.beta2, t.eps, decay, t.gradClip), "tg_set_hyper");
    check(api.tg_set_corpus(m, ptr, corpus.length, t.valFraction), "tg_set_corpus");
  }
  tg.free(ptr);
  check(api.tg_lora_init(lora, t.seed), "tg_lora_init");
  const times = new Map([[full, []], [lora, []]]);
  const steps = (m, n, into) => {
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      check(api.tg_train_step(m), "tg_train_step");
      into?.push(performance.now() - t0);
    }
  };
  steps(full, 1);  // warm-up
  steps(lora, 1);
  for (let r = 0; r < spec.rounds; r++) {
    for (const m of r % 2 ? [lora, full] : [full, lora]) steps(m, spec.steps, times.get(m));
  }
  result = { threads: api.tg_n_threads(full), full_ms: median(times.get(full)), lora_ms: median(times.get(lora)),
    full_arena: Number(api.tg_arena_bytes(full)), lora_arena: Number(api.tg_arena_bytes(lora)) };
  api.tg_destroy(full);
  api.tg_destroy(lora);
} catch (e) {
  result = { error: String(e?.stack || e) };
}
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(result.error ? 1 : 0);  // pthread workers keep Node's event loop alive
