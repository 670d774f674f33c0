// Text for an aria-live region, written at most once per interval: a screen reader re-reads a live
// region on every change, and a status that changes every training step would talk without pause.
// The latest text always lands (at the end of the interval), so nothing said is stale for long.
export function throttledText(element, intervalMs = 1000) {
  let last = -Infinity, pending = null, timer = null;
  const write = () => {
    timer = null;
    last = performance.now();
    if (element.textContent !== pending) element.textContent = pending;
  };
  return (text) => {
    pending = text;
    if (timer) return;
    const wait = last + intervalMs - performance.now();
    if (wait <= 0) write();
    else timer = setTimeout(write, wait);
  };
}
