// Module worker of browser_page.html: loads a build through the site's loader (so the loader's
// feature detection and choice run in a real browser worker) and runs one scenario.
import { detectFeatures, loadTinyGPT } from "../../site/static/js/wasm_loader.js";
import { runScenario } from "./scenario.mjs";

const baseUrl = new URL("/build-wasm/", self.location.href);

const toBase64 = (bytes) => {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
};
const sha256 = async (bytes) => [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))]
  .map((b) => b.toString(16).padStart(2, "0")).join("");

self.onmessage = async ({ data: spec }) => {
  try {
    const loaded = await loadTinyGPT(spec.config, { baseUrl, prefer: spec.prefer ?? null, threads: spec.threads ?? null });
    const head = { build: loaded.build, reason: loaded.reason, needBytes: loaded.needBytes,
      threads: loaded.threads, features: await detectFeatures() };
    if (spec.loaderOnly) { self.postMessage(head); return; }
    // Inputs are fetched up front so the scenario itself stays synchronous, as in Node.
    const files = {};
    for (const name of [spec.corpus, spec.initState].filter(Boolean)) {
      const r = await fetch(name);
      if (!r.ok) throw new Error(`fetch ${name}: HTTP ${r.status}`);
      files[name] = new Uint8Array(await r.arrayBuffer());
    }
    const written = {};
    const io = { read: (name) => files[name], write: (name, bytes) => { written[name] = bytes.slice(); } };
    const result = runScenario(loaded.tg, { ...spec, threads: loaded.threads }, io);
    result.exports = {};
    for (const [name, bytes] of Object.entries(written)) {
      result.exports[name] = { bytes: bytes.length, sha256: await sha256(bytes),
        base64: bytes.length <= 64 * 1024 * 1024 ? toBase64(bytes) : null };
    }
    self.postMessage({ ...head, ...result });
  } catch (e) {
    self.postMessage({ error: String(e?.stack || e) });
  }
};
