// Checkpoints in the origin private file system (OPFS), written so that a refresh or a crash at any
// moment leaves a readable one. Each run keeps its checkpoints as `<runId>-<step>.tinygpt`:
//   1. the new checkpoint goes to a NEW file (never over the current one),
//   2. it is read back and verified in full (header CRC, state length, state CRC),
//   3. only then are the run's older files removed.
// A file cut short by a crash fails step 2 or the listing's length check and is never offered; the
// previous file of that run is still there. Runs only in a dedicated Worker (sync access handles).
//
// A deleted run leaves a tombstone, `<runId>.deleted`: a save of that run that comes late (from this tab
// or another, which may still hold the model in memory) is refused, so a deleted row is never re-created.
// A rename rewrites the run's newest file under `<file>.renaming` and moves it into place (a crash in
// between is repaired by the next listing). Which tab may write a run is decided by Web Locks in the
// worker (model_locks.js), not here.
import { readHeader, readTinyGPT, writeTinyGPT, crc32, TinyGPTFileError } from "./tinygpt_file.js";
import { SECURE_CONTEXT_NEEDED } from "./wasm_loader.js";

const DIR = "checkpoints";
const MiB = 1024 * 1024;
const WRITE_CHUNK = 8 * MiB;  // a save reports its progress after each chunk
const tombstone = (runId) => `${runId}.deleted`;

/** A save or rename of a run that was deleted (in this tab or another). */
export class DeletedModelError extends Error {
  constructor(runId) {
    super("this model was deleted from Saved models (in this tab or another), so it is not saved again: " +
      "download it to keep it");
    this.name = "DeletedModelError";
    this.runId = runId;
  }
}

const hex8 = (x) => x.toString(16).padStart(8, "0");
/** The state bytes of a whole .tinygpt file (after its 12-byte prefix and header). */
const stateOf = (bytes) => bytes.subarray(12 + new DataView(bytes.buffer, bytes.byteOffset, 12).getUint32(8, true));
const sameBytes = (a, b) => {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
};

export const fileName = (runId, step, ext = "tinygpt") => `${runId}-${String(step).padStart(10, "0")}.${ext}`;

/**
 * What a store keeps: files `<runId>-<step>.<ext>`; readHeader(prefix, size) -> {header} proves a file's
 * header and length (for the listing), read(bytes) the whole file (throws `FileError` when unsound);
 * rewrite(parsed, header) the file with another header (a rename). The .tinygpt kind is this module's; a
 * fine-tune's adapters (adapter_store.js) are another.
 */
export const TINYGPT_FILES = {
  ext: "tinygpt", FileError: TinyGPTFileError, readHeader, read: readTinyGPT,
  rewrite: (parsed, header) => writeTinyGPT({ config: parsed.config, header, state: parsed.state }),
};

/**
 * {store, reason}: store is null when this browser gives no OPFS with sync access handles. The models'
 * store by default; `dirName` and `make(dir)` open another (adapter_store.js: the fine-tunes').
 */
export async function openStore(dirName = DIR, make = (dir) => new CheckpointStore(dir, TINYGPT_FILES)) {
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
    return { store: make(await root.getDirectoryHandle(dirName, { create: true })), reason: null };
  } catch (e) {
    return { store: null, reason: `the origin private file system cannot be opened (${e.message})` };
  }
}

export async function readBytes(handle, length = null) {
  const file = await handle.getFile();
  const blob = length === null ? file : file.slice(0, length);
  return { bytes: new Uint8Array(await blob.arrayBuffer()), size: file.size };
}

export class CheckpointStore {
  constructor(dir, kind) {
    this.dir = dir;
    this.kind = kind;
    this.NAME = new RegExp(`^([0-9a-z]+)-(\\d{10})\\.${kind.ext}$`);
    this.RENAMING = new RegExp(`^([0-9a-z]+-\\d{10}\\.${kind.ext})\\.renaming$`);
  }

  async _files() {
    const files = [];
    for await (const [name, handle] of this.dir.entries()) {
      const m = this.NAME.exec(name);
      if (m && handle.kind === "file") files.push({ name, handle, runId: m[1], step: Number(m[2]) });
    }
    return files;
  }

  async _exists(name) {
    try {
      await this.dir.getFileHandle(name);
      return true;
    } catch (e) {
      if (e.name === "NotFoundError" || e.name === "TypeMismatchError") return false;
      throw e;
    }
  }

  /** Whether `runId` was deleted: its saves are refused from then on. */
  isDeleted(runId) { return this._exists(tombstone(runId)); }

  /** A rename cut short by a crash: its new file moved into place if the old one is gone, else dropped. */
  async _repairRenames() {
    for await (const [name, handle] of this.dir.entries()) {
      const m = this.RENAMING.exec(name);
      if (!m || handle.kind !== "file") continue;
      if (await this._exists(m[1])) await this.dir.removeEntry(name).catch(() => {});
      else await handle.move(m[1]).catch(() => {});
    }
  }

  /** The header of a checkpoint file if its header and length are sound, else null. */
  async _peek(file) {
    try {
      const { bytes: prefix, size } = await readBytes(file.handle, 12);
      if (prefix.length < 12) return null;
      const n = new DataView(prefix.buffer).getUint32(8, true);
      const { bytes } = await readBytes(file.handle, 12 + n);
      return { ...this.kind.readHeader(bytes, size), size };
    } catch (e) {
      if (e instanceof this.kind.FileError) return null;
      throw e;
    }
  }

  /** The newest sound checkpoint of every run, newest first: [{id, file, header, size}]. */
  async list() {
    await this._repairRenames();
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
  async read(runId, tries = 3) {
    const files = (await this._files()).filter((f) => f.runId === runId).sort((a, b) => b.step - a.step);
    let problem = null;
    for (const f of files) {
      let bytes;
      try {
        ({ bytes } = await readBytes(f.handle));
      } catch (e) {
        // another tab's save removed this file meanwhile (its newer one is there now): list again
        if (e.name === "NotFoundError" && tries > 1) return this.read(runId, tries - 1);
        throw e;
      }
      try {
        return { bytes, parsed: this.kind.read(bytes) };
      } catch (e) {
        if (!(e instanceof this.kind.FileError)) throw e;
        problem ??= `${f.name}: ${e.message}`;
      }
    }
    throw new Error(problem ? `no readable checkpoint of this run (${problem})` : "this checkpoint no longer exists");
  }

  /**
   * Writes, verifies and makes current a checkpoint of `runId` at `step`; the run's older files go last.
   * onProgress({phase: "writing" | "verifying", done, total}) follows it (bytes written so far).
   */
  async save(runId, step, bytes, onProgress = () => {}) {
    if (await this.isDeleted(runId)) throw new DeletedModelError(runId);
    const estimate = await navigator.storage.estimate?.();
    if (estimate && estimate.quota - estimate.usage < bytes.length) {
      throw new Error(`the checkpoint needs ${(bytes.length / MiB).toFixed(1)} MiB but this site's storage has ` +
        `${((estimate.quota - estimate.usage) / MiB).toFixed(1)} MiB left: the previous checkpoint is kept; ` +
        "download the model or delete saved ones");
    }
    const name = fileName(runId, step, this.kind.ext);
    const handle = await this.dir.getFileHandle(name, { create: true });
    try {
      const access = await handle.createSyncAccessHandle();
      try {
        access.truncate(0);
        let at = 0;
        while (at < bytes.length) {
          at += access.write(bytes.subarray(at, Math.min(at + WRITE_CHUNK, bytes.length)), { at });
          onProgress({ phase: "writing", done: at, total: bytes.length });
        }
        access.flush();
      } finally {
        access.close();
      }
      onProgress({ phase: "verifying", done: bytes.length, total: bytes.length });
      const { bytes: back } = await readBytes(handle);
      this.kind.read(back);  // throws if what landed on disk is not what a reader accepts
    } catch (e) {
      await this.dir.removeEntry(name).catch(() => {});
      if (e.name === "QuotaExceededError") throw new Error("this site's storage quota is full: the previous checkpoint is kept");
      throw new Error(`the checkpoint could not be saved (${e.message}): the previous one is kept`);
    }
    for (const f of await this._files()) {
      if (f.runId === runId && f.name !== name) await this.dir.removeEntry(f.name).catch(() => {});
    }
  }

  /** Deletes every file of a run, after leaving its tombstone (so no late save re-creates it). */
  async remove(runId) {
    await this.dir.getFileHandle(tombstone(runId), { create: true });
    for (const f of await this._files()) if (f.runId === runId) await this.dir.removeEntry(f.name);
  }

  /**
   * The run whose newest checkpoint holds exactly `state` (step, weights and moments, byte for byte), or
   * null: saved rows are keyed by their content, so the same file uploaded twice, or the demo loaded
   * twice, is one row. The header's stateCrc32 (and the step) pick the candidates; the bytes decide.
   */
  async findIdentical(state, step) {
    const crc = hex8(crc32(state));
    for (const item of await this.list()) {
      if (item.header.stateCrc32 !== crc || Number(item.file.match(/-(\d+)\.tinygpt$/)[1]) !== step) continue;
      const bytes = await this.dir.getFileHandle(item.file).then(readBytes).then((r) => r.bytes).catch(() => null);
      if (bytes && sameBytes(stateOf(bytes), state)) return item.id;  // null: replaced meanwhile, so not this content
    }
    return null;
  }

  /** Gives the run's newest checkpoint a new `name` (its header's), rewriting the file; returns the new header. */
  async rename(runId, name) {
    if (await this.isDeleted(runId)) throw new DeletedModelError(runId);
    const files = (await this._files()).filter((f) => f.runId === runId).sort((a, b) => b.step - a.step);
    if (!files.length) throw new Error("this model is no longer saved");
    const file = files[0];
    const { bytes } = await readBytes(file.handle);
    const parsed = this.kind.read(bytes);
    const header = { ...parsed.header, name };
    for (const key of ["headerCrc32", "stateCrc32", "dataCrc32"]) delete header[key];
    const renamed = this.kind.rewrite(parsed, header);
    const temp = `${file.name}.renaming`;
    const handle = await this.dir.getFileHandle(temp, { create: true });
    const access = await handle.createSyncAccessHandle();
    try {
      access.truncate(0);
      let at = 0;
      while (at < renamed.length) at += access.write(renamed.subarray(at), { at });
      access.flush();
    } finally {
      access.close();
    }
    const landed = this.kind.read((await readBytes(handle)).bytes);  // readable before the old file goes
    await this.dir.removeEntry(file.name);
    await handle.move(file.name);
    return landed.header;
  }
}
