// The page of browser_bench.py: runs the bench in a module worker (where the site trains), shows its
// lines and sends each to the server, then posts the worker's result, or its error, which ends the run.
const log = document.getElementById("log");
const post = (path, body) => fetch(path, { method: "POST", body: JSON.stringify(body) });
const finish = (body) => post("/result", body);

const worker = new Worker(new URL("./browser_bench_worker.js", import.meta.url), { type: "module" });
worker.onmessage = ({ data }) => {
  if ("line" in data) {
    log.textContent += `${data.line}\n`;
    post("/line", data.line);
  } else {
    finish(data);
  }
};
worker.onerror = (e) => finish({ error: `the bench's worker failed: ${e.message}` });
worker.postMessage(Object.fromEntries(new URLSearchParams(location.search)));
