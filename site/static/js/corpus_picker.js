// The corpus picker of the Train section: the shipped TinyShakespeare, pasted text, an uploaded
// file (any bytes) or rows of a Hugging Face dataset. It says what the chosen corpus is and how the
// chosen preset splits it, and refuses (with a sentence) a corpus that cannot train that preset.
// Choosing or failing to fetch a corpus never touches the model in memory or the saved checkpoints.
import { corpusProblem, fileSizeProblem, splitSizes } from "./corpus_checks.js";
import { CURATED, datasetsServerBase, fetchRowsCorpus, isOfficialBase, parseDatasetId } from "./hf_rows.js";
import { openCorpusCache } from "./corpus_cache.js";
import { readFields } from "./form_checks.js";
import { sha256Hex } from "./sha256.js";

const SHIPPED_URL = new URL("../data/tinyshakespeare.txt", import.meta.url);
const SHIPPED_NAME = "tinyshakespeare.txt";  // the name checkpoints have always recorded for it
const TOKEN_KEY = "tinygpt.hfToken";
const MB = 1024 * 1024;
const $ = (id) => document.getElementById(id);
const n = (x) => x.toLocaleString("en");

export class CorpusPicker {
  /** modelOf(): {ctx, valFraction, preset} of the preset chosen in the form. */
  constructor(modelOf) {
    this.modelOf = modelOf;
    this.base = datasetsServerBase();
    this.shipped = null;    // Promise of Uint8Array
    this.file = null;       // {bytes, name} | {problem}
    this.hf = null;         // {bytes, name}
    this.fetching = null;   // AbortController of the fetch in progress
    this.hashes = new WeakMap();
    this.cacheOpened = openCorpusCache();

    $("hf-curated").replaceChildren(...CURATED.map(({ id, label }) => Object.assign(document.createElement("option"), { value: id, label })));
    const official = isOfficialBase(this.base);
    $("hf-base").textContent = `Rows are read from ${this.base}/rows` + (official ? "." :
      ", set by this page's ?datasets-server= address parameter. That is not Hugging Face's datasets-server, " +
      "so your token is not sent to it.");
    $("hf-base").classList.toggle("warning", !official);
    $("hf-token").value = localStorage.getItem(TOKEN_KEY) ?? "";
    $("hf-token").addEventListener("change", () => {
      const token = $("hf-token").value.trim();
      if (token) localStorage.setItem(TOKEN_KEY, token);
      else localStorage.removeItem(TOKEN_KEY);
    });
    $("corpus-source").addEventListener("change", () => this.showPanel());
    let typing = null;
    $("corpus-text").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => this.refresh(), 300); });
    $("corpus-file").addEventListener("change", (e) => this.pickFile(e.target.files[0]));
    $("hf-fetch").addEventListener("click", () => this.fetchHF());
    $("hf-cancel").addEventListener("click", () => this.fetching?.abort());
    this.showPanel();
  }

  source() { return $("corpus-source").value; }

  showPanel() {
    for (const [source, panel] of [["paste", "corpus-paste"], ["file", "corpus-upload"], ["hf", "corpus-hf"]]) {
      $(panel).hidden = this.source() !== source;
    }
    this.refresh();
  }

  shippedBytes() {
    this.shipped ??= fetch(SHIPPED_URL).then(async (r) => {
      if (!r.ok) throw new Error(`could not fetch the shipped corpus ${SHIPPED_URL.pathname}: HTTP ${r.status}`);
      return new Uint8Array(await r.arrayBuffer());
    });
    this.shipped.catch(() => { this.shipped = null; });  // a later try fetches again
    return this.shipped;
  }

  /** {bytes, name} of the chosen source, or throws a sentence when there is none yet. */
  async current() {
    switch (this.source()) {
      case "shakespeare": return { bytes: await this.shippedBytes(), name: SHIPPED_NAME };
      case "paste": return { bytes: new TextEncoder().encode($("corpus-text").value), name: "pasted text" };
      case "file":
        if (!this.file) throw new Error("Choose a file to train on (any bytes: text in any encoding, or binary).");
        if (this.file.problem) throw new Error(this.file.problem);
        return this.file;
      case "hf":
        if (!this.hf) throw new Error("Fetch the dataset's rows first (Fetch rows), or pick another corpus.");
        return this.hf;
    }
    throw new Error(`unknown corpus source ${this.source()}`);
  }

  /**
   * The corpus to train on: {bytes, identity: {name, bytes, sha256}}, or throws the sentence that
   * says why not. `model` ({ctx, valFraction}) defaults to the preset chosen in the form.
   */
  async chosen(model = this.modelOf()) {
    const { bytes, name } = await this.current();
    const problem = corpusProblem(bytes, name, model);
    if (problem) throw new Error(problem);
    if (!this.hashes.has(bytes)) this.hashes.set(bytes, await sha256Hex(bytes));
    return { bytes, identity: { name, bytes: bytes.length, sha256: this.hashes.get(bytes) } };
  }

  /**
   * {bytes, identity} of a corpus this tab holds whose SHA-256 is `sha256` (the shipped one, the pasted
   * text, the chosen file, fetched rows) and that can train `model`, or null: a model's own corpus, found
   * without changing the choice.
   */
  async find(sha256, model = this.modelOf()) {
    const held = [{ bytes: await this.shippedBytes().catch(() => null), name: SHIPPED_NAME }];
    if ($("corpus-text").value) held.push({ bytes: new TextEncoder().encode($("corpus-text").value), name: "pasted text" });
    if (this.file?.bytes) held.push(this.file);
    if (this.hf) held.push(this.hf);
    for (const { bytes, name } of held) {
      if (!bytes || corpusProblem(bytes, name, model)) continue;
      if (!this.hashes.has(bytes)) this.hashes.set(bytes, await sha256Hex(bytes));
      if (this.hashes.get(bytes) === sha256) return { bytes, identity: { name, bytes: bytes.length, sha256 } };
    }
    return null;
  }

  /** Rewrites the line under the picker: the corpus, its split for the chosen preset, or what is wrong. */
  async refresh() {
    const info = $("corpus-info");
    const model = this.modelOf();
    try {
      const { bytes, name } = await this.current();
      const problem = corpusProblem(bytes, name, model);
      if (problem) throw new Error(problem);
      const { train, val } = splitSizes(bytes.length, model.valFraction);
      info.textContent = `${name}: ${n(bytes.length)} bytes. With ${model.preset} (context ${model.ctx}): ` +
        `train ${n(train)} bytes, validation ${n(val)} bytes (the last ${Math.round(model.valFraction * 100)}%).`;
      info.classList.remove("error");
    } catch (e) {
      info.textContent = e.message;
      info.classList.add("error");
    }
  }

  async pickFile(file) {
    if (!file) return;
    const problem = fileSizeProblem(file.name, file.size);  // before a byte is read
    if (problem) {
      this.file = { problem };
    } else {
      try {
        this.file = { bytes: new Uint8Array(await file.arrayBuffer()), name: file.name };
      } catch (e) {
        this.file = { problem: `${file.name} cannot be read in this tab (${e.message}).` };
      }
    }
    await this.refresh();
  }

  /** Fetch rows: the button is off until this ends (a cache hit, a failure or the last page). */
  async fetchHF() {
    $("hf-fetch").disabled = true;
    try {
      await this.fetchRows();
    } finally {
      $("hf-fetch").disabled = false;
      $("hf-cancel").disabled = true;
    }
    await this.refresh();
  }

  async fetchRows() {
    const progress = $("hf-progress");
    const say = (text, error = false) => { progress.textContent = text; progress.classList.toggle("error", error); };
    let id;
    try {
      id = parseDatasetId($("hf-id").value);
    } catch (e) { say(e.message, true); return; }
    const { values, errors } = readFields({ cap: [$("hf-cap"), "Byte cap (MB)", { min: 0.001, max: 256 }] });
    if (errors.length) { say(errors.join(" "), true); return; }
    const maxBytes = Math.round(values.cap * MB);
    const name = `${id.dataset} (${id.config}/${id.split}, column ${id.column}, up to ${n(maxBytes)} bytes)`;
    const key = `${this.base} ${id.dataset}/${id.config}/${id.split}/${id.column} ${maxBytes}`;
    const { cache, reason } = await this.cacheOpened;
    const cached = cache ? await cache.get(key).catch(() => null) : null;
    if (cached) {
      this.hf = { bytes: cached, name };
      say(`${n(cached.length)} bytes of ${id.dataset} from this browser's cache (OPFS): no request made.`);
      return;
    }
    const controller = (this.fetching = new AbortController());
    $("hf-cancel").disabled = false;
    let got = 0;
    say(`Fetching rows of ${id.dataset}…`);
    try {
      const bytes = await fetchRowsCorpus({ base: this.base, id, maxBytes, token: $("hf-token").value.trim(), signal: controller.signal,
        onProgress: ({ bytes: b, rows, totalRows }) => {
          got = b;
          say(`Fetched ${n(b)} of at most ${n(maxBytes)} bytes (${n(rows)}${totalRows === null ? "" : ` of ${n(totalRows)}`} rows)…`);
        } });
      this.hf = { bytes, name };
      let stored = cache ? " Kept in this browser's cache (OPFS)." : ` Not cached: ${reason}.`;
      if (cache) await cache.put(key, bytes).catch((e) => { stored = ` Not cached: ${e.message}.`; });
      say(`Fetched ${n(bytes.length)} bytes of ${id.dataset}.${stored}`);
    } catch (e) {
      if (controller.signal.aborted) say(`Cancelled after ${n(got)} bytes: the corpus was not changed.`, true);
      else say(`Could not fetch ${id.dataset}: ${e.message}`, true);
    } finally {
      this.fetching = null;
    }
  }
}
