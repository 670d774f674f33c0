// A corpus from a Hugging Face dataset, read through the datasets-server `/rows` API
// (GET {base}/rows?dataset=&config=&split=&offset=&length=, at most 100 rows a page): the chosen
// column of each row, rows separated by a blank line, up to a byte cap. Each failure becomes a
// sentence the page shows; nothing here touches the model or the saved checkpoints.

export const DEFAULT_BASE = "https://datasets-server.huggingface.co";
export const ROWS_PER_PAGE = 100;  // the API's maximum `length`
const SEPARATOR = "\n\n";

/** Real datasets with a text column, offered in the picker; anything else can be typed in. */
export const CURATED = [
  { id: "roneneldan/TinyStories/default/train/text", label: "TinyStories (short stories in simple English)" },
  { id: "karpathy/tiny_shakespeare/default/train/text", label: "tiny_shakespeare on the Hub" },
  { id: "wikimedia/wikipedia/20231101.simple/train/text", label: "Simple English Wikipedia (Nov 2023)" },
];

/** "owner/name/config/split/column" (the dataset id may itself hold a slash) -> its parts, or throws. */
export function parseDatasetId(text) {
  const parts = text.trim().split("/").filter((p) => p !== "");
  if (parts.length < 4) {
    throw new Error(`"${text.trim()}" is not dataset/config/split/column: give four parts, e.g. ${CURATED[0].id}.`);
  }
  const [config, split, column] = parts.slice(-3);
  return { dataset: parts.slice(0, -3).join("/"), config, split, column };
}

/** The base URL of the rows API: `?datasets-server=` on the page's address overrides the real one
 * (an http(s) URL; anything else is ignored). */
export function datasetsServerBase(location = globalThis.location) {
  const override = new URL(location.href).searchParams.get("datasets-server");
  let base = DEFAULT_BASE;
  try {
    if (override && ["http:", "https:"].includes(new URL(override).protocol)) base = override;
  } catch { /* not a URL: the real server */ }
  return base.replace(/\/+$/, "");
}

/** Whether `base` is Hugging Face's own datasets-server, the one origin a token is sent to: the parsed
 * origins must be equal, so a look-alike host (…huggingface.co.example), a user part (…co@host) or
 * another scheme or port is not it. */
export function isOfficialBase(base) {
  try {
    const url = new URL(base);
    return url.origin === new URL(DEFAULT_BASE).origin && url.username === "" && url.password === "";
  } catch {
    return false;
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (typeof body?.error === "string") return body.error;
  } catch { /* not JSON: the status says enough */ }
  return response.statusText || "no reason given";
}

async function fetchPage(base, { dataset, config, split }, offset, token, signal) {
  const url = `${base}/rows?${new URLSearchParams({ dataset, config, split, offset, length: ROWS_PER_PAGE })}`;
  // Checked here, where the request is made, so that no caller can send a token anywhere else.
  const headers = token && isOfficialBase(base) ? { Authorization: `Bearer ${token}` } : {};
  let response;
  try {
    response = await fetch(url, { signal, headers });
  } catch (e) {
    if (signal.aborted) throw e;
    throw new Error(`could not reach ${base} (${e.message}): the network is down or the server refused this page (CORS).`);
  }
  if (response.status === 429) {
    throw new Error(`${base} is rate-limiting these requests (HTTP 429: ${await errorText(response)}). ` +
      "Wait a minute and fetch again; a Hugging Face token raises the limit.");
  }
  if (!response.ok) throw new Error(`${base} answered HTTP ${response.status} for ${dataset}: ${await errorText(response)}`);
  let body;
  try {
    body = await response.json();
  } catch {
    throw new Error(`${base} answered rows ${offset}–${offset + ROWS_PER_PAGE - 1} with something that is not JSON.`);
  }
  if (!Array.isArray(body?.rows) || body.rows.some((r) => typeof r?.row !== "object" || r.row === null)) {
    throw new Error(`${base} answered rows ${offset}–${offset + ROWS_PER_PAGE - 1} without a list of rows: not the /rows format.`);
  }
  return body;
}

/**
 * Fetches pages of rows until `maxBytes` (or the last row): Uint8Array of at most maxBytes.
 * onProgress({bytes, rows, totalRows}) after each page; `signal` cancels (the fetch rejects with AbortError).
 */
export async function fetchRowsCorpus({ base, id, maxBytes, token = "", signal, onProgress = () => {} }) {
  const encoder = new TextEncoder();
  const chunks = [];
  let bytes = 0, rows = 0, totalRows = null;
  while (bytes < maxBytes) {
    const body = await fetchPage(base, id, rows, token, signal);
    totalRows = Number.isInteger(body.num_rows_total) ? body.num_rows_total : totalRows;
    for (const { row } of body.rows) {
      if (!(id.column in row)) {
        throw new Error(`${id.dataset} has no column "${id.column}" (its columns: ${Object.keys(row).join(", ")}).`);
      }
      const value = row[id.column];
      const text = (typeof value === "string" ? value : JSON.stringify(value)) + SEPARATOR;
      const chunk = encoder.encode(text);
      chunks.push(chunk);
      bytes += chunk.length;
      rows++;
      if (bytes >= maxBytes) break;
    }
    onProgress({ bytes: Math.min(bytes, maxBytes), rows, totalRows });
    if (body.rows.length < ROWS_PER_PAGE || (totalRows !== null && rows >= totalRows)) break;
  }
  if (rows === 0) throw new Error(`${id.dataset} (${id.config}/${id.split}) has no rows.`);
  const out = new Uint8Array(Math.min(bytes, maxBytes));
  let at = 0;
  for (const c of chunks) {
    const part = c.subarray(0, out.length - at);
    out.set(part, at);
    at += part.length;
    if (at === out.length) break;
  }
  return out;
}
