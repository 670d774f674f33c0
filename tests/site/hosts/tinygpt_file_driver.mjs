// Drives site/static/js/tinygpt_file.js for tests/site/test_tinygpt_file_js.py: one process per batch.
//
// stdin: a JSON array of jobs {id, op, ...}; stdout: one JSON object {id: result}. Binary data goes
// through files (paths in the job); a result is {error, errorName} when the module threw.
//   read        {in, out}             readTinyGPT(whole file); the float32 state bytes -> out
//   readHeader  {in}                  readHeader(first 12 + N bytes, file size): lists without the state
//   write       {in, out, config, header, fp16, numbers}   state bytes in -> writeTinyGPT /
//               writeCompactF16 -> out; numbers: header keys set to Number(string), since JSON
//               cannot carry the NaN or Infinity that the writer must refuse
//   toF16       {in, out, name}       float32 array in -> f32ToF16Bits -> uint16 array out
//   fromF16     {in, out}             uint16 array in -> f16BitsToF32 -> float32 array out
//   crc32       {in, split}           crc32 of the file, whole and in two incremental parts
//   manifest    {config}              checkConfig, paramCount and manifestEntries
import { closeSync, fstatSync, openSync, readFileSync, readSync, writeFileSync } from "node:fs";

import * as tg from "../../../site/static/js/tinygpt_file.js";

const bytesOf = (path) => {
  const b = readFileSync(path);
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
};
// An aligned copy, so the typed-array views below may start at offset 0.
const aligned = (path) => bytesOf(path).slice();

function readPrefix(path) {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const first = new Uint8Array(12);
    readSync(fd, first, 0, 12, 0);
    const n = new DataView(first.buffer).getUint32(8, true);
    const prefix = new Uint8Array(Math.min(12 + n, size));
    readSync(fd, prefix, 0, prefix.length, 0);
    return { prefix, size };
  } finally {
    closeSync(fd);
  }
}

const summary = (r) => ({
  header: r.header, config: r.config, step: r.step, includesOptimizerState: r.includesOptimizerState,
  weightsDtype: r.weightsDtype,
});

const OPS = {
  read(job) {
    const r = tg.readTinyGPT(bytesOf(job.in));
    writeFileSync(job.out, r.state);
    return summary(r);
  },
  readHeader(job) {
    const { prefix, size } = readPrefix(job.in);
    const r = tg.readHeader(prefix, size);
    return { ...summary(r), stateOffset: r.stateOffset, stateLength: r.stateLength };
  },
  write(job) {
    const write = job.fp16 ? tg.writeCompactF16 : tg.writeTinyGPT;
    const header = { ...job.header };
    for (const [key, text] of Object.entries(job.numbers ?? {})) header[key] = Number(text);
    writeFileSync(job.out, write({ config: job.config, header, state: bytesOf(job.in) }));
    return {};
  },
  toF16(job) {
    writeFileSync(job.out, tg.f32ToF16Bits(new Float32Array(aligned(job.in).buffer), job.name));
    return {};
  },
  fromF16(job) {
    writeFileSync(job.out, tg.f16BitsToF32(new Uint16Array(aligned(job.in).buffer)));
    return {};
  },
  crc32(job) {
    const b = bytesOf(job.in);
    return { whole: tg.crc32(b), incremental: tg.crc32(b.subarray(job.split), tg.crc32(b.subarray(0, job.split))) };
  },
  manifest(job) {
    const config = tg.checkConfig(job.config);
    return { config, paramCount: tg.paramCount(config), manifest: tg.manifestEntries(config) };
  },
};

function run(job) {
  try {
    return OPS[job.op](job);
  } catch (e) {
    return { error: e.message, errorName: e.name }; // the tests require TinyGPTFileError
  }
}

const jobs = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(Object.fromEntries(jobs.map((job) => [job.id, run(job)]))));
