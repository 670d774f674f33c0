// Drives site/static/js/adapter_file.js for tests/site/test_adapter_file_js.py: one process per batch.
//
// stdin: a JSON array of jobs {id, op, ...}; stdout: one JSON object {id: result}. Binary data goes
// through files (paths in the job); a result is {error, errorName} when the module threw.
//   read        {in, out}          readAdapter(whole file); the adapter state bytes -> out
//   readHeader  {in}               readAdapterHeader(first 12 + N bytes, file size)
//   write       {in, out, baseConfig, lora, baseCrc32, baseSha256, header, numbers}
//               adapter state bytes in -> writeAdapter -> out; numbers: header keys set to Number(string)
//   base        {in, base, baseState}   baseProblem(readAdapter(in), {config, crc32, sha256 of baseState's weights})
import { closeSync, fstatSync, openSync, readFileSync, readSync, writeFileSync } from "node:fs";

import * as af from "../../../site/static/js/adapter_file.js";

const bytesOf = (path) => {
  const b = readFileSync(path);
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
};

function readPrefix(path) {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const first = new Uint8Array(12);
    readSync(fd, first, 0, 12, 0);
    const n = size >= 12 ? new DataView(first.buffer).getUint32(8, true) : 0;
    const prefix = new Uint8Array(Math.max(12, Math.min(12 + n, size)));
    readSync(fd, prefix, 0, Math.min(prefix.length, size), 0);
    return { prefix, size };
  } finally {
    closeSync(fd);
  }
}

const summary = (r) => ({ header: r.header, lora: r.lora, baseConfig: r.baseConfig, step: r.step,
  includesOptimizerState: r.includesOptimizerState, Q: r.Q });

const OPS = {
  read(job) {
    const r = af.readAdapter(bytesOf(job.in));
    writeFileSync(job.out, r.state);
    return summary(r);
  },
  readHeader(job) {
    const { prefix, size } = readPrefix(job.in);
    return summary(af.readAdapterHeader(prefix, size));
  },
  write(job) {
    const header = { ...job.header };
    for (const [key, text] of Object.entries(job.numbers ?? {})) header[key] = Number(text);
    writeFileSync(job.out, af.writeAdapter({ baseConfig: job.baseConfig, lora: job.lora, baseCrc32: job.baseCrc32,
      baseSha256: job.baseSha256, header, state: bytesOf(job.in).slice() }));
    return {};
  },
  async base(job) {
    const adapter = af.readAdapter(bytesOf(job.in));
    const identity = await af.baseIdentity(bytesOf(job.baseState).slice(), job.base);
    return { problem: af.baseProblem(adapter, { config: job.base, ...identity }), identity };
  },
};

async function run(job) {
  try {
    return await OPS[job.op](job);
  } catch (e) {
    return { error: e.message, errorName: e.name };
  }
}

const jobs = JSON.parse(readFileSync(0, "utf8"));
const out = {};
for (const job of jobs) out[job.id] = await run(job);
process.stdout.write(JSON.stringify(out));
