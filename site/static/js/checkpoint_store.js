// Checkpoints in the origin private file system (OPFS), written so that a refresh or a crash at any
// moment leaves a readable one. Each run keeps its checkpoints as `<runId>-<step>.tinygpt`:
//   1. the new checkpoint goes to a NEW file (never over the current one),
//   2. it is read back and verified in full (header CRC, state length, state CRC),
//   3. only then are the run's older files removed.
// A file cut short by a crash fails step 2 or the listing's length check and is never offered; the
// previous file of that run is still there. Runs only in a dedicated Worker (sync access handles).
import { readHeader, readTinyGPT, TinyGPTFileError } from "./tinygpt_file.js";
import { SECURE_CONTEXT_NEEDED } from "./wasm_loader.js";

const DIR = "checkpoints";
const NAME = /^([0-9a-z]+)-(\d{10})\.tinygpt$/;
const MiB = 1024 * 1024;

export const fileName = (runId, step) => `${runId}-${String(step).padStart(10, "0")}.tinygpt`;

/** {store, reason}: store is null when this browser gives no OPFS with sync access handles. */
export async function openStore() {
  if (!globalThis.navigator?.storage?.getDirectory) {
    const why = globalThis.isSecureContext === false ? `OPFS needs a secure context: this page is ${SECURE_CONTEXT_NEEDED}`
      : "this browser has no origin private file system (OPFS)";
    return { store: null, reason: why };
  }
  if (typeof FileSystemFileHandle === "undefined" || !("createSyncAccessHandle" in FileSystemFileHandle.prototype)) {
    return { store: null, reason: "this browser's OPFS has no synchronous access in workers" };
  }
  try {
    const root = await navigator.storage.getDirectory();
    return { store: new CheckpointStore(await root.getDirectoryHandle(DIR, { create: true })), reason: null };
  } catch (e) {
    return { store: null, reason: `the origin private file system cannot be opened (${e.message})` };
  }
}

async function readBytes(handle, length = null) {
  const file = await handle.getFile();
  const blob = length === null ? file : file.slice(0, length);
  return { bytes: new Uint8Array(await blob.arrayBuffer()), size: file.size };
}

class CheckpointStore {
  constructor(dir) { this.dir = dir; }

  async _files() {
    const files = [];
    for await (const [name, handle] of this.dir.entries()) {
      const m = NAME.exec(name);
      if (m && handle.kind === "file") files.push({ name, handle, runId: m[1], step: Number(m[2]) });
    }
    return files;
  }

  /** The header of a checkpoint file if its header and length are sound, else null. */
  async _peek(file) {
    try {
      const { bytes: prefix, size } = await readBytes(file.handle, 12);
      if (prefix.length < 12) return null;
      const n = new DataView(prefix.buffer).getUint32(8, true);
      const { bytes } = await readBytes(file.handle, 12 + n);
      return { ...readHeader(bytes, size), size };
    } catch (e) {
      if (e instanceof TinyGPTFileError) return null;
      throw e;
    }
  }

  /** The newest sound checkpoint of every run, newest first: [{id, file, header, size}]. */
  async list() {
    const byRun = new Map();
    for (const f of await this._files()) byRun.set(f.runId, [...(byRun.get(f.runId) ?? []), f]);
    const items = [];
    for (const [runId, files] of byRun) {
      files.sort((a, b) => b.step - a.step);
      let newest = null;
      for (const f of files) {
        const peek = await this._peek(f);
        if (peek) {
          newest = f;
          items.push({ id: runId, file: f.name, header: peek.header, size: peek.size });
          break;
        }
      }
      // files older than the run's newest sound one: left by a crash between a save's verification
      // and its clean-up (an unsound NEWER file may be a save in progress in another tab: kept)
      for (const f of newest ? files.filter((x) => x.step < newest.step) : []) {
        await this.dir.removeEntry(f.name).catch(() => {});
      }
    }
    return items.sort((a, b) => String(b.header.savedAt).localeCompare(String(a.header.savedAt)));
  }

  /** The newest checkpoint of a run that verifies in full: {bytes, parsed} (parsed = readTinyGPT's). */
  async read(runId) {
    const files = (await this._files()).filter((f) => f.runId === runId).sort((a, b) => b.step - a.step);
    let problem = null;
    for (const f of files) {
      const { bytes } = await readBytes(f.handle);
      try {
        return { bytes, parsed: readTinyGPT(bytes) };
      } catch (e) {
        if (!(e instanceof TinyGPTFileError)) throw e;
        problem ??= `${f.name}: ${e.message}`;
      }
    }
    throw new Error(problem ? `no readable checkpoint of this run (${problem})` : "this checkpoint no longer exists");
  }

  /** Writes, verifies and makes current a checkpoint of `runId` at `step`; the run's older files go last. */
  async save(runId, step, bytes) {
    const estimate = await navigator.storage.estimate?.();
    if (estimate && estimate.quota - estimate.usage < bytes.length) {
      throw new Error(`the checkpoint needs ${(bytes.length / MiB).toFixed(1)} MiB but this site's storage has ` +
        `${((estimate.quota - estimate.usage) / MiB).toFixed(1)} MiB left: the previous checkpoint is kept; ` +
        "download the model or delete saved ones");
    }
    const name = fileName(runId, step);
    const handle = await this.dir.getFileHandle(name, { create: true });
    try {
      const access = await handle.createSyncAccessHandle();
      try {
        access.truncate(0);
        let at = 0;
        while (at < bytes.length) at += access.write(bytes.subarray(at), { at });
        access.flush();
      } finally {
        access.close();
      }
      const { bytes: back } = await readBytes(handle);
      readTinyGPT(back);  // throws if what landed on disk is not what a reader accepts
    } catch (e) {
      await this.dir.removeEntry(name).catch(() => {});
      if (e.name === "QuotaExceededError") throw new Error("this site's storage quota is full: the previous checkpoint is kept");
      throw new Error(`the checkpoint could not be saved (${e.message}): the previous one is kept`);
    }
    for (const f of await this._files()) {
      if (f.runId === runId && f.name !== name) await this.dir.removeEntry(f.name).catch(() => {});
    }
  }

  async remove(runId) {
    for (const f of await this._files()) if (f.runId === runId) await this.dir.removeEntry(f.name);
  }
}
