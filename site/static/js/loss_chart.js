// Training loss (every step) and validation loss (every eval) against the step, on a canvas.
// Redraws at most once per animation frame however many points arrive.
export class LossChart {
  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    // a GPU process crash loses an accelerated canvas; once the browser restores it, draw again
    canvas.addEventListener("contextrestored", () => this.draw());
    this.reset(1);
  }

  reset(totalSteps) {
    this.total = totalSteps;
    this.train = [];
    this.val = [];
    this.schedule();
  }

  addTrain(step, loss) { this.train.push([step, loss]); this.schedule(); }
  addVal(step, loss) { this.val.push([step, loss]); this.schedule(); }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    const { ctx, canvas } = this;
    const w = canvas.width, h = canvas.height, pad = { l: 44, r: 10, t: 10, b: 24 };
    ctx.clearRect(0, 0, w, h);
    const losses = [...this.train, ...this.val].map(([, l]) => l).filter(Number.isFinite);
    const top = Math.max(1, ...losses), bottom = Math.min(top - 0.5, ...losses, top);
    const yMin = Math.max(0, Math.floor(bottom * 2) / 2), yMax = Math.ceil(top * 2) / 2;
    const x = (s) => pad.l + (w - pad.l - pad.r) * (s / Math.max(1, this.total));
    const y = (l) => pad.t + (h - pad.t - pad.b) * (1 - (l - yMin) / Math.max(1e-9, yMax - yMin));
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#666";
    ctx.strokeStyle = "#eee";
    for (let i = 0; i <= 4; i++) {
      const l = yMin + ((yMax - yMin) * i) / 4;
      ctx.beginPath(); ctx.moveTo(pad.l, y(l)); ctx.lineTo(w - pad.r, y(l)); ctx.stroke();
      ctx.fillText(l.toFixed(2), 4, y(l) + 4);
    }
    ctx.fillText(`step ${this.total}`, w - pad.r - 60, h - 6);
    ctx.fillText("0", pad.l, h - 6);
    const line = (points, color, width) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.beginPath();
      points.forEach(([s, l], i) => (i ? ctx.lineTo(x(s), y(l)) : ctx.moveTo(x(s), y(l))));
      ctx.stroke();
      ctx.lineWidth = 1;
    };
    line(this.train, "#3b6fb6", 1);
    line(this.val, "#d9730d", 2);
    ctx.fillStyle = "#3b6fb6"; ctx.fillText("train", w - pad.r - 90, pad.t + 10);
    ctx.fillStyle = "#d9730d"; ctx.fillText("validation", w - pad.r - 55, pad.t + 10);
  }
}
