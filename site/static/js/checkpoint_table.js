// The "Saved models" table: one row per run that OPFS holds (its newest sound checkpoint), with
// Resume, Download, Download fp16 and Delete. actions: {resume(id), download(id, compact), remove(item)}.

const size = (bytes) => (bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(2)} GB` : bytes >= 1024 ** 2
  ? `${(bytes / 1024 ** 2).toFixed(1)} MB` : `${(bytes / 1024).toFixed(0)} kB`);
const loss = (x) => (Number.isFinite(x) ? x.toFixed(4) : "—");
const when = (iso) => (iso ? new Date(iso).toLocaleString("en-GB", { dateStyle: "short", timeStyle: "short" }) : "—");

function button(text, onClick, name) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.name = name;
  b.addEventListener("click", onClick);
  return b;
}

export function renderCheckpoints(tbody, items, actions) {
  const rows = items.map((it) => {
    const tr = document.createElement("tr");
    tr.dataset.id = it.id;
    const target = it.targetSteps && it.targetSteps > it.step ? ` of ${it.targetSteps}` : "";
    for (const text of [it.name + (it.backend ? ` (${it.backend === "webgpu" ? "WebGPU" : "WebAssembly"})` : ""),
      `${it.step}${target}`, loss(it.loss), loss(it.valLoss), when(it.savedAt), size(it.bytes)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    const td = document.createElement("td");
    td.className = "row-actions";
    td.append(
      button(it.targetSteps > it.step ? "Resume" : "Load", () => actions.resume(it.id), "resume"),
      button("Download", () => actions.download(it.id, false), "download"),
      button("fp16", () => actions.download(it.id, true), "download-fp16"),
      button("Delete", () => actions.remove(it), "delete"),
    );
    tr.append(td);
    return tr;
  });
  tbody.replaceChildren(...rows);
}
