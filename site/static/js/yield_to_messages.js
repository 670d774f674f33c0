// Lets a worker's queued messages run between bursts of work (training steps, generated tokens).
// setTimeout(0) is clamped to 4 ms when nested; a MessageChannel is not.
export const yieldToMessages = () => new Promise((resolve) => {
  const { port1, port2 } = new MessageChannel();
  port1.onmessage = () => { port1.close(); resolve(); };
  port2.postMessage(null);
});
