// The Saved models section of the page: the table (checkpoint_table.js), selecting and deleting several,
// renaming, a delete confirmation that names each model's step (the live step of the model in this tab),
// messages about what another tab prevents, and this site's storage: used, quota, and whether the browser
// keeps it (navigator.storage.persist(), asked once, after the first save). What the worker refuses comes
// back as `refused` messages; every list comes from the worker (`checkpoints`), never from a copy here.
import { renderCheckpoints, BUSY_WORDS } from "./checkpoint_table.js";

const $ = (id) => document.getElementById(id);
const MB = 1024 * 1024;
const amount = (bytes) => (bytes >= 1024 * MB ? `${(bytes / 1024 / MB).toFixed(2)} GB` : `${(bytes / MB).toFixed(1)} MB`);

export class SavedModels {
  /** post(message) to the worker; model() the record of the model in this tab (or null); actions: {resume, open, download}. */
  constructor({ post, model, actions }) {
    this.post = post;
    this.model = model;
    this.actions = actions;
    this.items = [];
    this.training = false;
    this.askedToPersist = false;
    $("delete-selected").addEventListener("click", () => this.removeSelected());
  }

  render(items) {
    this.items = items;
    const chosen = new Set(this.selectedIds());
    renderCheckpoints($("checkpoints").tBodies[0], items, {
      resume: (it) => this.guard(it, "resumed") && this.actions.resume(it),
      open: (it) => this.actions.open(it),
      rename: (it) => this.rename(it),
      download: (id, compact) => this.actions.download(id, compact),
      remove: (it) => this.remove([it]),
      selected: () => this.selectionChanged(),
    });
    for (const box of this.boxes()) box.checked = chosen.has(box.value);
    $("no-checkpoints").hidden = items.length > 0;
    this.setTraining(this.training);  // new rows' buttons as the run allows
    this.showStorage();
  }

  boxes() { return [...document.querySelectorAll("#checkpoints input[name=select]")]; }
  selectedIds() { return this.boxes().filter((b) => b.checked).map((b) => b.value); }

  selectionChanged() {
    const n = this.selectedIds().length;
    $("delete-selected").disabled = n === 0 || this.training;
    $("delete-selected").textContent = n > 1 ? `Delete ${n} selected` : "Delete selected";
  }

  /** Controls while this tab trains: nothing saved may change under the run. */
  setTraining(training) {
    this.training = training;
    for (const b of document.querySelectorAll("#checkpoints button")) b.disabled = training || b.dataset.busyElsewhere === "1";
    this.selectionChanged();
  }

  say(text, error = true) {
    $("saved-message").textContent = text ?? "";
    $("saved-message").classList.toggle("error", Boolean(text) && error);
  }

  /** A row another tab trains cannot be `verb` here: says why (the worker refuses it too, in a race). */
  guard(item, verb) {
    if (item.busy !== "elsewhere") return true;
    this.say(`"${item.name}" was not ${verb}: it is ${BUSY_WORDS.elsewhere}.`);
    return false;
  }

  /** "tiny, seed 5" (step 120) — the model in this tab at its live step where it is that one. */
  stepWords(item) {
    const m = this.model();
    if (m && m.id === item.id && m.step !== item.step) return `saved at step ${item.step}; in this tab it is at step ${m.step}`;
    return `step ${item.step}`;
  }

  remove(items) {
    const blocked = items.filter((it) => it.busy === "elsewhere");
    this.say(blocked.map((it) => `"${it.name}" was not deleted: it is ${BUSY_WORDS.elsewhere}.`).join(" "));
    items = items.filter((it) => it.busy !== "elsewhere");
    if (!items.length) return;
    const names = items.map((it) => `"${it.name}" (${this.stepWords(it)})`).join(", ");
    const inTab = items.some((it) => it.id === this.model()?.id) ? " The model in this tab stays in memory, no longer saved." : "";
    if (!confirm(`Delete ${items.length > 1 ? `${items.length} saved models: ` : "the saved model "}${names}? ` +
      `This cannot be undone.${inTab}`)) return;
    this.post({ type: "delete", ids: items.map((it) => it.id) });
  }

  removeSelected() {
    const ids = new Set(this.selectedIds());
    this.remove(this.items.filter((it) => ids.has(it.id)));
  }

  rename(item) {
    if (!this.guard(item, "renamed")) return;
    const name = prompt(`New name for "${item.name}" (${this.stepWords(item)}):`, item.name);
    if (name === null || name.trim() === "" || name.trim() === item.name) return;
    this.say("");
    this.post({ type: "rename", id: item.id, name: name.trim() });
  }

  /** A save happened: the first one in this page asks the browser to keep this site's storage. */
  async saved() {
    if (!this.askedToPersist && navigator.storage?.persist) {
      this.askedToPersist = true;
      await navigator.storage.persist().catch(() => false);
    }
    this.showStorage();
  }

  /** "Storage: 45.2 MB used of 9.8 GB this site may use · kept: …" — or why this browser cannot say. */
  async showStorage() {
    const line = $("storage");
    const s = navigator.storage;
    const parts = [];
    if (s?.estimate) {
      const { usage, quota } = await s.estimate();
      const models = this.items.reduce((sum, it) => sum + it.bytes, 0);
      parts.push(`Storage: ${amount(usage)} used of ${amount(quota)} this site may use (saved models ${amount(models)}).`);
    } else {
      parts.push("This browser does not say how much storage this site uses (no navigator.storage.estimate).");
    }
    if (s?.persisted) {
      const kept = await s.persisted();
      parts.push(kept ? "Persistent: yes, the browser keeps it until you delete it."
        : "Persistent: no, the browser may clear it when space runs low" +
          (this.askedToPersist ? " (it declined to make it persistent)." : " (it is asked at the first save)."));
    } else {
      parts.push("This browser cannot make storage persistent: it may clear saved models when space runs low; download the ones to keep.");
    }
    line.textContent = parts.join(" ");
    window.playground.storage = line.textContent;
  }
}
