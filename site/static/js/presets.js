// site/static/presets.json, loaded once for every JS module of the page and its worker: presets,
// defaults and the rules of every config field. No top-level await: a module worker whose imports
// await drops the messages posted to it meanwhile, so the file is fetched by loadPresets() (the
// worker and the page await it first) and read synchronously only by a caller that did not.
const URL_OF_PRESETS = new URL("../presets.json", import.meta.url);
let loaded = null;

/** presets.json, parsed: fetched next to this module in a browser (at /static/ or from the repository root alike). */
export async function loadPresets() {
  if (loaded) return loaded;
  if (URL_OF_PRESETS.protocol === "file:") return presetsNow();
  const response = await fetch(URL_OF_PRESETS);
  if (!response.ok) throw new Error(`${URL_OF_PRESETS} could not be fetched (HTTP ${response.status})`);
  return (loaded ??= await response.json());
}

/**
 * presets.json now, for synchronous code (the .tinygpt reader's defaults and rules): what
 * loadPresets() fetched, else read at once, from disk under Node (whose fetch takes no file: URLs)
 * or by one synchronous request in a browser.
 */
export function presetsNow() {
  if (loaded) return loaded;
  if (URL_OF_PRESETS.protocol === "file:") {
    const fs = globalThis.process?.getBuiltinModule?.("node:fs");
    if (!fs) throw new Error("reading presets.json needs Node 20.16 or later (process.getBuiltinModule)");
    return (loaded = JSON.parse(fs.readFileSync(URL_OF_PRESETS, "utf8")));
  }
  const request = new XMLHttpRequest();
  request.open("GET", URL_OF_PRESETS, false);
  request.send();
  if (request.status !== 200) throw new Error(`${URL_OF_PRESETS} could not be fetched (HTTP ${request.status})`);
  return (loaded = JSON.parse(request.responseText));
}
