// Corpora fetched from a dataset server, kept in this browser's OPFS by dataset id and byte cap, so
// choosing the same dataset again costs no requests. Where OPFS (or writing to it from the page) is
// missing, the cache says why and the corpus is fetched every time.
const DIR = "corpora";

const fileName = (key) => `${encodeURIComponent(key)}.bin`;

/** {cache, reason}: cache.get(key) -> Uint8Array | null, cache.put(key, bytes). */
export async function openCorpusCache() {
  if (!globalThis.navigator?.storage?.getDirectory) return { cache: null, reason: "this browser has no OPFS" };
  if (!globalThis.FileSystemFileHandle?.prototype.createWritable) {
    return { cache: null, reason: "this browser cannot write OPFS files from the page" };
  }
  try {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle(DIR, { create: true });
    return { cache: new CorpusCache(dir), reason: null };
  } catch (e) {
    return { cache: null, reason: `OPFS cannot be opened here (${e.message})` };
  }
}

class CorpusCache {
  constructor(dir) { this.dir = dir; }

  async get(key) {
    try {
      const file = await (await this.dir.getFileHandle(fileName(key))).getFile();
      return new Uint8Array(await file.arrayBuffer());
    } catch (e) {
      if (e.name === "NotFoundError") return null;
      throw e;
    }
  }

  async put(key, bytes) {
    const writable = await (await this.dir.getFileHandle(fileName(key), { create: true })).createWritable();
    await writable.write(bytes);
    await writable.close();
  }
}
