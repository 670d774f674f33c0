// A Plan is a recorded list of dispatches: pipeline + bind group + workgroup counts, with every
// dispatch's uniforms in one 256-byte slot of one uniform buffer. Bind groups are made once; a step
// only replays the list into a compute pass, so a steady step creates no GPU objects.
// A frozen plan can be re-recorded with new uniform values and counts (same kernels and buffers):
// generation does this for each position of the KV cache.

import { UNIFORM_SLOT_BYTES as SLOT } from "./kernels/kernel.js";

export class PipelineCache {
  constructor(device) {
    this.device = device;
    this.byName = new Map();
    this.pending = new Map(); // name -> the promise of its prepare() in flight
  }
  get(k) {
    let entry = this.byName.get(k.name);
    if (entry) return entry;
    const { layout, descriptor } = this._describe(k);
    entry = { kernel: k, layout, pipeline: this.device.createComputePipeline(descriptor) };
    this.byName.set(k.name, entry);
    return entry;
  }

  /**
   * Compiles k's pipeline without blocking (createComputePipelineAsync), for a kernel whose first use
   * can wait: a software adapter takes seconds over a big one. Resolves when get(k) finds it. Two
   * prepares of one kernel share one compile (two Decoders on a trainer each prepare theirs).
   */
  prepare(k) {
    if (this.byName.has(k.name)) return Promise.resolve();
    let pending = this.pending.get(k.name);
    if (!pending) {
      const { layout, descriptor } = this._describe(k);
      pending = this.device.createComputePipelineAsync(descriptor).then((pipeline) => {
        if (!this.byName.has(k.name)) this.byName.set(k.name, { kernel: k, layout, pipeline });
      }).finally(() => this.pending.delete(k.name));
      this.pending.set(k.name, pending);
    }
    return pending;
  }

  _describe(k) {
    const device = this.device;
    const layout = device.createBindGroupLayout({
      label: k.name,
      entries: [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } },
        ...k.buffers.map(([, mode], i) => ({
          binding: i + 1, visibility: GPUShaderStage.COMPUTE,
          buffer: { type: mode === "rw" ? "storage" : "read-only-storage" },
        }))],
    });
    const module = device.createShaderModule({ label: k.name, code: k.code });
    return { layout, descriptor: { label: k.name, layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: k.entryPoint } } };
  }
}

export class Plan {
  constructor(device, pipelines, label) {
    this.device = device;
    this.pipelines = pipelines;
    this.label = label;
    this.entries = [];
    this.frozen = false;
    this.cursor = 0;
    this.data = new ArrayBuffer(0);
    this.view = new DataView(this.data); // over all slots, remade when data grows
  }

  /** Starts re-recording a frozen plan: the same sequence of add() calls must follow. */
  rerecord() {
    if (!this.frozen) throw new Error(`plan ${this.label} is not frozen yet`);
    this.cursor = 0;
  }

  /**
   * values: {field: number} for the kernel's uniforms; buffers: per binding a GPUBuffer or a view
   * {buffer, offset, size} (offset a multiple of 256 bytes); grid: [x, y] or [x, y, z].
   */
  add(k, values, buffers, grid) {
    if (buffers.length !== k.buffers.length) throw new Error(`${k.name}: ${buffers.length} buffers for ${k.buffers.length} bindings`);
    if (grid[0] === 0 || grid[1] === 0 || grid[2] === 0) return this.frozen ? this._skip(k) : undefined;
    const index = this.frozen ? this.cursor++ : this.entries.length;
    if (this.frozen && (index >= this.entries.length || this.entries[index].kernel !== k)) {
      throw new Error(`plan ${this.label}: re-recording diverged at dispatch ${index} (${k.name})`);
    }
    if (!this.frozen) {
      this.entries.push({ kernel: k, pipeline: this.pipelines.get(k).pipeline, buffers, grid, bindGroup: null });
      if ((index + 1) * SLOT > this.data.byteLength) {
        const grown = new ArrayBuffer(Math.max(SLOT * 64, this.data.byteLength * 2));
        new Uint8Array(grown).set(new Uint8Array(this.data));
        this.data = grown;
        this.view = new DataView(grown);
      }
    }
    this.entries[index].grid = grid;
    this._write(index, k, values);
    return index;
  }

  _skip(k) { throw new Error(`plan ${this.label}: empty dispatch of ${k.name} while re-recording`); }

  /** Writes the kernel's uniforms into the dispatch's slot: all of them, or (some) only those in values. */
  _write(index, k, values, some = false) {
    for (let i = 0; i < k.uniforms.length; i++) { // an index loop: a step's update allocates nothing
      const name = k.uniforms[i][0], type = k.uniforms[i][1], value = values[name], at = index * SLOT + 4 * i;
      if (value === undefined && some) continue;
      if (value === undefined || Number.isNaN(value)) throw new Error(`${k.name}: uniform ${name} is ${value}`);
      if (type === "f32") this.view.setFloat32(at, value, true);
      else {
        if (!Number.isInteger(value) || value < 0 || value >= 2 ** 32) throw new Error(`${k.name}: ${name}=${value} is not a u32`);
        this.view.setUint32(at, value, true);
      }
    }
  }

  /**
   * Replaces some of one dispatch's uniforms (those in values, e.g. AdamW's bias corrections; the
   * rest keep what was recorded) and uploads that slot only.
   */
  update(index, values) {
    const e = this.entries[index];
    const uniforms = e.kernel.uniforms;
    for (const name in values) {
      let known = false;
      for (let i = 0; i < uniforms.length && !known; i++) known = uniforms[i][0] === name;
      if (!known) throw new Error(`${e.kernel.name} has no uniform ${name}`);
    }
    this._write(index, e.kernel, values, true);
    this.device.queue.writeBuffer(this.uniformBuffer, index * SLOT, this.data, index * SLOT, SLOT);
  }

  /** Creates the uniform buffer and bind groups (first time) and uploads all uniforms. */
  freeze() {
    if (!this.frozen) {
      this.uniformBuffer = this.device.createBuffer({
        label: `${this.label} uniforms`, size: Math.max(SLOT, this.entries.length * SLOT),
        usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
      });
      this.entries.forEach((e, i) => {
        e.bindGroup = this.device.createBindGroup({
          label: e.kernel.name,
          layout: this.pipelines.get(e.kernel).layout,
          entries: [{ binding: 0, resource: { buffer: this.uniformBuffer, offset: i * SLOT, size: Math.max(16, Math.ceil(e.kernel.uniforms.length / 4) * 16) } },
            ...e.buffers.map((b, j) => ({ binding: j + 1, resource: b.buffer ? b : { buffer: b } }))],
        });
      });
      this.frozen = true;
    } else if (this.cursor !== this.entries.length) {
      throw new Error(`plan ${this.label}: re-recorded ${this.cursor} of ${this.entries.length} dispatches`);
    }
    this.device.queue.writeBuffer(this.uniformBuffer, 0, this.data, 0, this.entries.length * SLOT);
  }

  /** The recorded uniforms and workgroup counts of a frozen plan, for restore() to put back. */
  snapshot() {
    if (!this.frozen) throw new Error(`plan ${this.label} is not frozen yet`);
    return { data: this.data.slice(0, this.entries.length * SLOT), grids: this.entries.map((e) => [...e.grid]) };
  }

  /**
   * Puts back what snapshot() took and uploads the uniforms: what re-recording the same values
   * would do, without running the recording code again.
   */
  restore({ data, grids }) {
    if (!this.frozen || grids.length !== this.entries.length) throw new Error(`plan ${this.label}: a snapshot of ${grids.length} dispatches for ${this.entries.length}`);
    new Uint8Array(this.data).set(new Uint8Array(data));
    for (let i = 0; i < grids.length; i++) this.entries[i].grid = grids[i];
    this.device.queue.writeBuffer(this.uniformBuffer, 0, data);
  }

  /** Records dispatches [first, end) into the pass, each `times` times (profiling replays >1). */
  encode(pass, { first = 0, end = this.entries.length, times = 1 } = {}) {
    for (let i = first; i < end; i++) { // an index loop: a step records without allocating
      const e = this.entries[i];
      pass.setPipeline(e.pipeline);
      pass.setBindGroup(0, e.bindGroup);
      for (let r = 0; r < times; r++) pass.dispatchWorkgroups(e.grid[0], e.grid[1], e.grid[2] ?? 1);
    }
  }

  destroy() { if (this.uniformBuffer) this.uniformBuffer.destroy(); }
}
