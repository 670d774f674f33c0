// Module Web Worker for tests: runs one trainJob (browser_entry.js) off the page's thread.
import { trainJob } from "./browser_entry.js";

self.onmessage = async (e) => {
  try {
    self.postMessage({ result: await trainJob(e.data) });
  } catch (err) {
    self.postMessage({ error: String(err && err.stack ? err.stack : err) });
  }
};
