// The Compute Pressure chip beside tokens/s: how hard the CPU is pressed (nominal, fair, serious,
// critical), from PressureObserver where the browser has it. A step that slows down under "serious"
// is the machine, not the model. Without the API the chip stays hidden and the feature list says so.

const WORDS = {
  nominal: "CPU pressure: nominal",
  fair: "CPU pressure: fair",
  serious: "CPU pressure: serious (steps may slow down)",
  critical: "CPU pressure: critical (the system is throttling)",
};

/** Starts observing; returns {ok, text}: a line for the feature list. */
export async function startPressureChip(chip) {
  chip.hidden = true;
  if (!("PressureObserver" in globalThis)) {
    return { ok: false, text: "No Compute Pressure API: the CPU pressure chip is hidden" };
  }
  try {
    const observer = new PressureObserver((records) => {
      const state = records[records.length - 1].state;
      chip.textContent = WORDS[state] ?? `CPU pressure: ${state}`;
      chip.dataset.state = state;
      chip.hidden = false;
    });
    await observer.observe("cpu", { sampleInterval: 1000 });
    return { ok: true, text: "Compute Pressure API: CPU pressure shown beside tokens/s" };
  } catch (e) {
    return { ok: false, text: `Compute Pressure API present but not usable here (${e.message}): the chip is hidden` };
  }
}
