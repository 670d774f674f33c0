// Many tabs, one truth: which tab may write a saved model, and news of every change to the saved models.
// A saved model has one writer at a time: the tab that trains it holds the Web Lock "tinygpt-model-<id>"
// (navigator.locks) for the whole run, final save included, and a delete or rename takes the same lock,
// so a model training in one tab cannot be deleted, renamed or resumed in another (it can be opened there
// to sample). A BroadcastChannel tells every tab of this origin that the list changed (a save, a delete,
// a rename, a run that started or ended), and each lists again. Where a browser lacks either API the
// page says so (features) and works alone. Runs in the worker and in the page (both have these APIs).

const PREFIX = "tinygpt-model-";
const CHANNEL = "tinygpt-models";

export const lockName = (id) => PREFIX + id;

/** What this context offers: {locks, channel} booleans, each with the sentence the page shows. */
export function tabFeatures() {
  const locks = !!globalThis.navigator?.locks?.request;
  const channel = typeof globalThis.BroadcastChannel === "function";
  return {
    locks, channel,
    locksText: locks ? "Web Locks: a model training in one tab cannot be resumed or deleted in another"
      : "No Web Locks: this tab cannot tell whether another tab is training a saved model; keep each model in one tab",
    channelText: channel ? "BroadcastChannel: saved models made in other tabs appear here at once"
      : "No BroadcastChannel: saved models made in other tabs appear here only after a reload",
  };
}

/**
 * Takes the writer's lock of saved model `id` if no tab holds it: resolves to {release()} when taken,
 * null when another holder has it. Without Web Locks every request succeeds (one tab is all we can know).
 */
export function tryLock(id) {
  if (!globalThis.navigator?.locks?.request) return Promise.resolve({ release() {}, id });
  return new Promise((resolve, reject) => {
    navigator.locks.request(lockName(id), { ifAvailable: true }, (lock) => {
      if (!lock) { resolve(null); return undefined; }
      return new Promise((release) => resolve({ release, id }));
    }).catch(reject);
  });
}

/** The ids of saved models whose writer's lock some tab (this one included) holds now. */
export async function lockedIds() {
  if (!globalThis.navigator?.locks?.query) return new Set();
  const { held } = await navigator.locks.query();
  return new Set(held.filter((l) => l.name?.startsWith(PREFIX)).map((l) => l.name.slice(PREFIX.length)));
}

/** The origin's channel: post(what) tells the other tabs; onChange(fn) hears theirs. A no-op without BroadcastChannel. */
export function modelsChannel() {
  if (typeof BroadcastChannel !== "function") return { post() {}, onChange() {} };
  const channel = new BroadcastChannel(CHANNEL);
  return {
    post(what) { channel.postMessage({ what, at: Date.now() }); },
    onChange(fn) { channel.onmessage = ({ data }) => fn(data); },
  };
}
