// The "Saved models" table: one row per saved model (a run's newest sound checkpoint in OPFS; a model
// byte-identical to a saved one is that row, not another), with a box to select it (Delete selected),
// its corpus, and Resume (an unfinished run), Open (any: sample and evaluate without training), Rename,
// Download, Download fp16 and Delete. A model that another tab is training (its Web Lock held there,
// model_locks.js) says so; it can be opened here, not resumed, renamed or deleted.
// A LoRA fine-tune's row (kind "lora") names its base, and downloads its adapter (.tgla) or its merged model.
// actions: {resume(item), open(item), rename(item), download(id, compact | "adapter" | "merged"), remove(item), selected()}.
import { corporaWords } from "./model_record.js";

const size = (bytes) => (bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(2)} GB` : bytes >= 1024 ** 2
  ? `${(bytes / 1024 ** 2).toFixed(1)} MB` : `${(bytes / 1024).toFixed(0)} kB`);
const loss = (x) => (Number.isFinite(x) ? x.toFixed(4) : "—");
const when = (iso) => (iso ? new Date(iso).toLocaleString("en-GB", { dateStyle: "short", timeStyle: "short" }) : "—");
export const BUSY_WORDS = {
  here: "training in this tab",
  elsewhere: "training in another tab: open it here to sample; stop it there to resume, rename or delete it",
};

function button(text, onClick, name, title = "") {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.name = name;
  if (title) b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

function cell(text, className = "") {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

export function renderCheckpoints(tbody, items, actions) {
  const rows = items.map((it) => {
    const tr = document.createElement("tr");
    tr.dataset.id = it.id;
    if (it.busy) tr.dataset.busy = it.busy;
    const pick = document.createElement("input");
    pick.type = "checkbox";
    pick.name = "select";
    pick.value = it.id;
    pick.setAttribute("aria-label", `Select ${it.name}`);
    pick.addEventListener("change", () => actions.selected());
    const choose = cell("", "row-select");
    choose.append(pick);
    const model = cell(it.name + (it.backend ? ` (${it.backend === "webgpu" ? "WebGPU" : "WebAssembly"})` : ""), "row-name");
    if (it.kind === "lora") {  // a fine-tune names its base (issue 60)
      const base = document.createElement("span");
      base.className = "lora-badge";
      base.textContent = `LoRA fine-tune of ${it.base.name}${it.base.step !== null ? ` (step ${it.base.step})` : ""}` +
        (it.lora ? `, rank ${it.lora.rank}` : "");
      if (it.base.sha256) base.title = `The base's weights have SHA-256 ${it.base.sha256}`;
      model.append(document.createElement("br"), base);
    }
    if (it.busy) {
      const badge = document.createElement("span");
      badge.className = "busy-badge";
      badge.textContent = BUSY_WORDS[it.busy];
      model.append(document.createElement("br"), badge);
    }
    const target = it.targetSteps && it.targetSteps > it.step ? ` of ${it.targetSteps}` : "";
    const val = cell(loss(it.valLoss));
    if (Number.isFinite(it.valLoss)) {
      val.title = `The lowest validation loss measured while it trained${it.valStep ? ` (at step ${it.valStep})` : ""}, ` +
        "on its own corpus. Evaluate measures the model as it is now, on the corpus chosen in Train.";
    }
    tr.append(choose, model, cell(corporaWords(it.corpora.length ? it.corpora : it.corpus ? [it.corpus] : []), "row-corpus"),
      cell(`${it.step}${target}`), cell(loss(it.loss)), val, cell(when(it.savedAt)), cell(size(it.bytes)));
    const td = cell("", "row-actions");
    const elsewhere = it.busy === "elsewhere" ? BUSY_WORDS.elsewhere : "";
    const unfinished = it.targetSteps > it.step;
    if (unfinished) {
      const resume = button("Resume", () => actions.resume(it), "resume", elsewhere);
      resume.dataset.busyElsewhere = elsewhere ? "1" : "";
      td.append(resume);
    }
    td.append(button("Open", () => actions.open(it), "open", "Load it to sample, evaluate and look inside, without training"));
    const rename = button("Rename", () => actions.rename(it), "rename", elsewhere);
    const del = button("Delete", () => actions.remove(it), "delete", elsewhere);
    for (const b of [rename, del]) b.dataset.busyElsewhere = elsewhere ? "1" : "";
    if (it.kind === "lora") {
      td.append(rename, button("Adapter", () => actions.download(it.id, "adapter"), "download", "Download the adapter file (.tgla)"),
        button("Merged", () => actions.download(it.id, "merged"), "download-merged", "Download the merged model (.tinygpt)"), del);
    } else {
      td.append(rename, button("Download", () => actions.download(it.id, false), "download"),
        button("fp16", () => actions.download(it.id, true), "download-fp16"), del);
    }
    tr.append(td);
    return tr;
  });
  tbody.replaceChildren(...rows);
}
