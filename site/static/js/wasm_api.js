// One calling convention for all five WebAssembly builds.
//
// In the Memory64 build every pointer and size_t is an i64 and crosses into JS as a BigInt; in the
// other four it is an i32 and crosses as a Number. int64_t is a BigInt in all of them
// (-sWASM_BIGINT). This wrapper converts both ways, driven by tinygpt_api.js (generated from
// tinygpt_api.h by the build), so worker code passes and receives plain Numbers everywhere and is
// identical for all five builds. Numbers are exact up to 2^53 bytes, far beyond the 16 GB maximum.
// The structs the API takes by pointer (tg_config) are written from the same file's layout, each
// field from a JS object by its key: a field added to the header needs no change here or in a caller.

const toBigInt = (x, what) => {
  if (typeof x === "bigint") return x;
  if (!Number.isSafeInteger(x)) throw new TypeError(`${what}: expected an integer, got ${x}`);
  return BigInt(x);
};
const toNumber = (x) => (typeof x === "bigint" ? Number(x) : x);
// Little-endian, as WebAssembly memory is.
const FIELD_WRITERS = {
  int32_t: (view, offset, x) => view.setInt32(offset, x, true),
  int64_t: (view, offset, x) => view.setBigInt64(offset, x, true),
  uint64_t: (view, offset, x) => view.setBigUint64(offset, x, true),
  float: (view, offset, x) => view.setFloat32(offset, x, true),
  double: (view, offset, x) => view.setFloat64(offset, x, true),
};

// Wraps an instantiated Emscripten module. signatures = the default export of tinygpt_api.js.
export function wrapTinyGPT(module, signatures, { memory64 }) {
  const pointerIn = memory64 ? (x, what) => toBigInt(x, what) : (x) => toNumber(x);
  const convertIn = {
    p: pointerIn,
    j: toBigInt,
    i: (x) => x,
    f: (x) => x,
  };

  const wrap = (name, sig) => {
    const raw = module["_" + name];
    if (typeof raw !== "function") throw new Error(`WebAssembly module lacks export _${name}`);
    const conv = sig.args.map((k) => convertIn[k]);
    return (...args) => {
      if (args.length !== conv.length) {
        throw new TypeError(`${name} takes ${conv.length} arguments, got ${args.length}`);
      }
      const r = raw(...args.map((a, i) => conv[i](a, `${name} argument ${i + 1}`)));
      return sig.result === "v" ? undefined : toNumber(r);
    };
  };

  const api = {};
  for (const [name, sig] of Object.entries(signatures.functions)) api[name] = wrap(name, sig);
  const malloc = wrap("malloc", { args: ["p"], result: "p" });
  const free = wrap("free", { args: ["p"], result: "v" });

  // Views are made fresh on every call: memory.grow replaces the buffer (and detaches an
  // ordinary one), so a view kept across calls could be stale.
  const memory = module.wasmMemory;
  const buffer = () => memory.buffer;
  const f32 = (ptr, count) => new Float32Array(buffer(), ptr, count);
  const i32 = (ptr, count) => new Int32Array(buffer(), ptr, count);
  const u8 = (ptr, length) => new Uint8Array(buffer(), ptr, length);

  // C string at ptr -> JS string. Copied first: TextDecoder refuses views of shared memory.
  const string = (ptr) => {
    if (!ptr) return "";
    const bytes = new Uint8Array(buffer());
    let end = ptr;
    while (bytes[end] !== 0) end++;
    return new TextDecoder().decode(bytes.slice(ptr, end));
  };

  // The C API's errors: a negative return code (or a null model) plus the core's own message.
  const failure = (what, code) => new Error(`${what} failed (code ${code}): ${string(api.tg_last_error())}`);
  const check = (rc, what) => {
    if (rc < 0) throw failure(what, rc);
    return rc;
  };

  // Copies bytes (Uint8Array / ArrayBuffer view) into a new malloc'd block; the caller frees it.
  const copyIn = (data) => {
    const src = data instanceof Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const ptr = malloc(Math.max(1, src.length));
    if (!ptr) throw new Error(`out of WebAssembly memory copying in ${src.length} bytes`);
    u8(ptr, src.length).set(src);
    return ptr;
  };
  const copyOut = (ptr, length) => u8(ptr, length).slice();

  // Struct `name` of the header in a malloc'd block for the duration of fn(ptr): each field from
  // values by its key (n_layer from values.nLayer). Fixed-size fields only (api_signatures.py), so
  // one layout serves every build.
  const withStruct = (name, values, fn) => {
    const layout = signatures.structs[name];
    if (!layout) throw new Error(`the C API has no struct ${name}`);
    const missing = layout.fields.filter((f) => !(f.key in values)).map((f) => f.key);
    if (missing.length) throw new TypeError(`${name} needs ${missing.join(", ")}`);
    const ptr = malloc(layout.size);
    if (!ptr) throw new Error(`out of WebAssembly memory for a ${name}`);
    try {
      const view = new DataView(buffer(), ptr, layout.size);
      for (const f of layout.fields) {
        const where = `${name}.${f.name}`;
        FIELD_WRITERS[f.type](view, f.offset, f.type.endsWith("64_t") ? toBigInt(values[f.key], where) : values[f.key]);
      }
      return fn(ptr);
    } finally {
      free(ptr);
    }
  };

  return { api, malloc, free, f32, i32, u8, string, failure, check, copyIn, copyOut, withStruct,
    memoryBytes: () => buffer().byteLength, memory64 };
}
