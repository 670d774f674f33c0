// Fine-tunes in the origin private file system (OPFS), beside the models (checkpoint_store.js) and kept
// the same way: each fine-tune's adapter checkpoints are `<runId>-<step>.tgla` (LoRA adapter files with
// their AdamW moments, step, data state and corpus: adapter_file.js), written to a new file, read back
// and verified before the run's older files go; a deleted fine-tune leaves a tombstone.
//
// An adapter names its base by the SHA-256 of the base's weights; the base itself is kept here too, once
// per distinct base, as `base-<sha256>.tinygpt` (weights only, float32, the base's own header): a
// fine-tune resumes on exactly the weights it was trained on even after the saved model it came from
// trained on, was renamed or was deleted. A base goes when the last fine-tune of it is deleted.
import { CheckpointStore, openStore, readBytes } from "./checkpoint_store.js";
import { readAdapter, readAdapterHeader, writeAdapter, baseIdentity } from "./adapter_file.js";
import { readTinyGPT, TinyGPTFileError } from "./tinygpt_file.js";

const DIR = "finetunes";
const BASE = /^base-([0-9a-f]{64})\.tinygpt$/;
const baseName = (sha256) => `base-${sha256}.tinygpt`;

export const ADAPTER_FILES = {
  ext: "tgla", FileError: TinyGPTFileError, readHeader: readAdapterHeader, read: readAdapter,
  rewrite: (parsed, header) => writeAdapter({ baseConfig: parsed.baseConfig, lora: parsed.lora, header, state: parsed.state,
    baseCrc32: parsed.header.baseWeightsCrc32, baseSha256: parsed.header.baseWeightsSha256 }),
};

/** {store, reason}: the fine-tunes' store, or null and why (as openStore). */
export const openAdapterStore = () => openStore(DIR, (dir) => new AdapterStore(dir, ADAPTER_FILES));

class AdapterStore extends CheckpointStore {
  /** Whether the base of this SHA-256 is kept. */
  async hasBase(sha256) {
    try {
      await this.dir.getFileHandle(baseName(sha256));
      return true;
    } catch (e) {
      if (e.name === "NotFoundError" || e.name === "TypeMismatchError") return false;
      throw e;
    }
  }

  /**
   * Keeps the base of a fine-tune: `bytes()` gives its .tinygpt (weights only) when it is not kept yet.
   * Written under a temporary name, verified (readable, and its weights hash to `sha256`), then moved
   * into place, so a crash never leaves a base that is not what its name says.
   */
  async putBase(sha256, bytes) {
    if (await this.hasBase(sha256)) return;
    const file = await bytes();
    const temp = `${baseName(sha256)}.writing`;
    const handle = await this.dir.getFileHandle(temp, { create: true });
    try {
      const access = await handle.createSyncAccessHandle();
      try {
        access.truncate(0);
        let at = 0;
        while (at < file.length) at += access.write(file.subarray(at), { at });
        access.flush();
      } finally {
        access.close();
      }
      const parsed = readTinyGPT((await readBytes(handle)).bytes);
      const landed = await baseIdentity(parsed.state, parsed.config);
      if (landed.sha256 !== sha256) throw new Error("what was written is not the base (its SHA-256 differs)");
      await handle.move(baseName(sha256));
    } catch (e) {
      await this.dir.removeEntry(temp).catch(() => {});
      throw new Error(`the fine-tune's base could not be kept (${e.message}): the fine-tune is not saved`);
    }
  }

  /** The kept base of this SHA-256: readTinyGPT's {header, config, step, state}, checked against its name. */
  async readBase(sha256) {
    let bytes;
    try {
      ({ bytes } = await readBytes(await this.dir.getFileHandle(baseName(sha256))));
    } catch (e) {
      if (e.name !== "NotFoundError") throw e;
      throw new Error(`its base model (weights sha256 ${sha256.slice(0, 16)}…) is no longer kept in this browser`);
    }
    const parsed = readTinyGPT(bytes);
    if ((await baseIdentity(parsed.state, parsed.config)).sha256 !== sha256) {
      throw new Error(`the kept base model ${baseName(sha256)} does not hash to its name: it is damaged`);
    }
    return parsed;
  }

  /** Deletes a fine-tune (tombstone first, as a model), then every base no fine-tune names any more. */
  async remove(runId) {
    await super.remove(runId);
    const named = new Set((await this.list()).map((it) => it.header.baseWeightsSha256));
    for await (const [name, handle] of this.dir.entries()) {
      const m = BASE.exec(name);
      if (m && handle.kind === "file" && !named.has(m[1])) await this.dir.removeEntry(name).catch(() => {});
    }
  }
}
