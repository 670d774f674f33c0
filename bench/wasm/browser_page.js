// The script of browser_page.html (a module of its own: the playground's Content-Security-Policy, which
// the test server sends too, allows no inline script). Each runInWorker(spec) runs one scenario in a
// fresh module Worker (so each gets its own WebAssembly memory) and shows the loader's choice.
window.runInWorker = (spec) => new Promise((resolve) => {
  const worker = new Worker(new URL("./browser_worker.mjs", import.meta.url), { type: "module" });
  const finish = (result) => { worker.terminate(); resolve(result); };
  worker.onmessage = ({ data }) => {
    if (data.build) document.getElementById("build").textContent = data.build;
    if (data.reason) document.getElementById("build-reason").textContent = data.reason;
    finish(data);
  };
  worker.onerror = (e) => finish({ error: `worker error: ${e.message}` });
  worker.postMessage(spec);
});
window.tinygptReady = true;
