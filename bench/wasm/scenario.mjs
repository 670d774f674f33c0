// One training scenario against a wrapped TinyGPT module (site/static/js/wasm_api.js). The same
// code runs in Node (node_driver.mjs) and in a browser module worker (browser_worker.mjs), for every
// build, which is the point: the worker code never branches on the build.
//
// spec: {
//   config:   {nLayer, nHead, dModel, ctx, vocabSize, layerNormEps, initStd, batch}
//   training: {lr, beta1, beta2, eps, weightDecay, gradClip, valFraction, seed}
//   threads:  pool size counted with the caller (1 = inline)
//   initState: name of a .tinygpt state (io.read) to import, else tg_init(initSeed)
//   initSeed, corpus: name of the corpus bytes (io.read), optional
//   mode: "steps" (tg_train_step on the corpus stream) | "overfit" (one fixed batch) |
//         "fixed-batch" (tg_train_step_batch on a batch derived from dataSeed, no corpus)
//   steps, overfitTarget, exportState: name for io.write of the exported state (with moments)
//   growBytes: after the first step, create a second model with an arena of about this many bytes
//              (forcing memory.grow while this model's pool threads are alive), then keep training
//   lora:     {rank, alpha, targets (tg_lora_config's mask), seed}: a LoRA model (tg_create_lora) whose
//             adapters start from tg_lora_init(seed) and alone train; exportLora: name for io.write of
//             the adapter state (with moments)
// }
// Returns plain JSON: losses, per-step milliseconds, sizes, the memory size before/after.

export function runScenario(tg, spec, io) {
  const { api, check } = tg;
  const c = spec.config;
  const create = (cfg, threads, lora = null) => {
    const m = tg.withStruct("tg_config", cfg, (ptr) => (lora
      ? tg.withStruct("tg_lora_config", lora, (lp) => api.tg_create_lora(ptr, lp, cfg.batch, threads))
      : api.tg_create(ptr, cfg.batch, threads)));
    if (!m) throw tg.failure(lora ? "tg_create_lora" : "tg_create", api.tg_last_error_code());
    return m;
  };
  const withCopy = (bytes, fn) => {
    const ptr = tg.copyIn(bytes);
    try { return fn(ptr); } finally { tg.free(ptr); }
  };

  const out = { memoryBytesStart: tg.memoryBytes() };
  let t0 = performance.now();
  const model = create(c, spec.threads ?? 1, spec.lora ?? null);
  out.createMs = performance.now() - t0;
  const extra = [];
  try {
    Object.assign(out, {
      paramCount: api.tg_param_count(model),
      arenaBytes: api.tg_arena_bytes(model),
      arenaBytesFor: tg.withStruct("tg_config", c, (ptr) => api.tg_arena_bytes_for(ptr, c.batch)),
      nThreads: api.tg_n_threads(model),
      memoryBytesAfterCreate: tg.memoryBytes(),
    });
    t0 = performance.now();
    if (spec.initState) {
      const bytes = io.read(spec.initState);
      withCopy(bytes, (p) => check(api.tg_import_state(model, p, bytes.length), "tg_import_state"));
    } else {
      check(api.tg_init(model, spec.initSeed), "tg_init");
    }
    if (spec.lora) {
      check(api.tg_lora_init(model, spec.lora.seed), "tg_lora_init");
      out.loraParamCount = Number(api.tg_lora_param_count(model));
    }
    out.initMs = performance.now() - t0;
    const t = spec.training;
    check(api.tg_set_hyper(model, t.lr, t.beta1, t.beta2, t.eps, t.weightDecay, t.gradClip), "tg_set_hyper");
    if (spec.corpus) {
      const bytes = io.read(spec.corpus);
      withCopy(bytes, (p) => check(api.tg_set_corpus(model, p, bytes.length, t.valFraction), "tg_set_corpus"));
    }
    check(api.tg_set_data_state(model, t.seed, 0), "tg_set_data_state");

    const tokens = c.batch * c.ctx;
    let x = 0, y = 0;
    if (spec.mode !== "steps") {
      x = tg.malloc(4 * tokens);
      y = tg.malloc(4 * tokens);
      if (spec.mode === "overfit") {
        check(api.tg_next_batch(model, x, y), "tg_next_batch");
      } else {
        // A deterministic batch without a corpus: token i = (i * 7 + seed) mod vocab, y = x shifted.
        const xi = tg.i32(x, tokens), yi = tg.i32(y, tokens);
        for (let i = 0; i < tokens; i++) {
          xi[i] = (i * 7 + t.seed) % c.vocabSize;
          yi[i] = ((i + 1) * 7 + t.seed) % c.vocabSize;
        }
      }
    }
    const step = () => spec.mode === "steps"
      ? api.tg_train_step(model)
      : api.tg_train_step_batch(model, x, y, c.batch, c.ctx);

    out.losses = [];
    out.stepMs = [];
    for (let i = 0; i < spec.steps; i++) {
      const t0 = performance.now();
      const loss = step();
      out.stepMs.push(performance.now() - t0);
      check(loss, `training step ${i + 1}`);
      out.losses.push(loss);
      if (spec.mode === "overfit" && loss < spec.overfitTarget) break;
      if (i === 0 && spec.growBytes) {
        // Grow WebAssembly memory while this model's pool threads exist and have just worked.
        const before = tg.memoryBytes();
        const grow = create({ ...c, batch: c.batch * Math.ceil(spec.growBytes / out.arenaBytes) }, spec.threads ?? 1);
        extra.push(grow);
        check(api.tg_init(grow, 1), "tg_init (growth model)");
        out.growth = { before, after: tg.memoryBytes(), arenaBytes: api.tg_arena_bytes(grow) };
      }
    }
    if (x) { tg.free(x); tg.free(y); }
    out.step = api.tg_step(model);

    if (spec.exportState) {
      const n = api.tg_state_bytes(model, 1);
      const buf = tg.malloc(n);
      if (!buf) throw new Error(`cannot allocate ${n} bytes for the exported state`);
      try {
        const written = check(api.tg_export_state(model, buf, n, 1), "tg_export_state");
        if (written !== n) throw new Error(`tg_export_state wrote ${written} bytes, expected ${n}`);
        io.write(spec.exportState, tg.u8(buf, n));
      } finally {
        tg.free(buf);
      }
      out.stateBytes = n;
    }
    if (spec.exportLora) {
      const n = Number(api.tg_lora_state_bytes(model, 1));
      const buf = tg.malloc(n);
      try {
        check(api.tg_lora_export_state(model, buf, n, 1), "tg_lora_export_state");
        io.write(spec.exportLora, tg.u8(buf, n));
      } finally {
        tg.free(buf);
      }
    }
    if (spec.viewState) {
      // Huge models: read the state in place (no second copy); report its size and a checksum.
      const n = api.tg_state_bytes(model, 1);
      const view = tg.u8(api.tg_state_ptr(model), n);
      let sum = 0;
      for (let i = 0; i < n; i += 4099) sum = (sum * 31 + view[i]) >>> 0;
      out.stateView = { bytes: n, step: new DataView(view.buffer, view.byteOffset, 4).getInt32(0, true), sampleSum: sum };
    }
    out.memoryBytesEnd = tg.memoryBytes();
    return out;
  } finally {
    for (const m of extra) api.tg_destroy(m);
    api.tg_destroy(model);
  }
}
