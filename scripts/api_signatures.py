#!/usr/bin/env python3
"""Reads the tg_ C API declarations from a header and prints them as JSON for the JS wrapper; the
Python bindings (api_ctypes.py) call parse() on the same header.

The JS side must know, for every argument and result, whether it is pointer-sized (BigInt in the
Memory64 build, Number in the others), a 64-bit integer (BigInt in every build, -sWASM_BIGINT),
or a plain 32-bit/float value (Number); ctypes needs the C types themselves; both need the byte
layout of the structs passed by pointer. Deriving all that from the header, instead of keeping
hand-written lists in JS and Python, means an API change cannot silently desynchronise them.

Output: {"functions": {"tg_name": {"result": K, "args": [K, ...], "c_types": {"result": T, "args": [T, ...]}}},
         "structs": {"tg_name": {"size": bytes, "fields": [{"name", "key", "type", "offset"}, ...]}}}
with K one of "p" pointer or size_t/ptrdiff_t, "j" int64_t/uint64_t, "i" 32-bit int/bool/enum,
"f" float/double, "v" void (result only); T the C type without qualifiers ("float*", "tg_config*").
A struct field's key is its name in camelCase (n_layer: nLayer), the name callers look its value up
by; its type is one of STRUCT_FIELD_BYTES, so the layout is the same in every build.
"""
import json
import re
import sys

POINTER_SIZED = {"size_t", "ssize_t", "ptrdiff_t", "intptr_t", "uintptr_t"}
INT64 = {"int64_t", "uint64_t", "long long", "unsigned long long"}
INT32 = {"int", "unsigned", "unsigned int", "int32_t", "uint32_t", "bool", "char", "signed char",
         "unsigned char", "int8_t", "uint8_t", "int16_t", "uint16_t", "short", "unsigned short"}
FLOAT = {"float", "double"}
QUALIFIERS = re.compile(r"\b(const|volatile|struct|enum|restrict|__restrict__|__restrict)\b")
# Fixed-size types only: no pointers or size_t, whose width differs between the builds.
STRUCT_FIELD_BYTES = {"int32_t": 4, "int64_t": 8, "uint64_t": 8, "float": 4, "double": 8}


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def kind(ctype: str, enums: set[str], where: str) -> str:
    if "*" in ctype or "[" in ctype:
        return "p"
    base = " ".join(QUALIFIERS.sub(" ", ctype).split())
    if base == "void":
        return "v"
    if base in POINTER_SIZED:
        return "p"
    if base in INT64:
        return "j"
    if base in INT32 or base in enums:
        return "i"
    if base in FLOAT:
        return "f"
    sys.exit(f"api_signatures.py: {where}: type '{ctype.strip()}' has no known wasm ABI kind; "
             "use a pointer, size_t, int64_t, int32/int/bool/enum, float or double")


def split_param(param: str) -> str:
    """'const float* x' -> 'const float*';  'int64_t n' -> 'int64_t';  'float' -> 'float'."""
    param = param.split("=")[0].strip()
    m = re.match(r"^(.*?)([A-Za-z_]\w*)\s*(\[[^\]]*\])?$", param)
    if m and m.group(1).strip() and not m.group(1).strip().endswith(("unsigned", "signed", "long")) \
            and m.group(2) not in INT32 | FLOAT | {"void"}:
        return m.group(1) + (m.group(3) or "")
    return param


def bare(ctype: str) -> str:
    """The C type without qualifiers: 'const float *' -> 'float*'."""
    return " ".join(QUALIFIERS.sub(" ", ctype).replace("*", " * ").split()).replace(" *", "*")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def struct_layout(name: str, body: str) -> dict:
    """C's layout of the struct: each field at the next multiple of its size (its alignment)."""
    fields, offset, align = [], 0, 1
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        m = re.match(r"^([\w\s]+?)\s+(\w+)$", decl)
        ctype = bare(m.group(1)) if m else decl
        if not m or ctype not in STRUCT_FIELD_BYTES:
            sys.exit(f"api_signatures.py: struct {name}: field '{decl}' is not one of "
                     f"{', '.join(STRUCT_FIELD_BYTES)} followed by a name")
        size = STRUCT_FIELD_BYTES[ctype]
        offset = -(-offset // size) * size
        fields.append({"name": m.group(2), "key": camel(m.group(2)), "type": ctype, "offset": offset})
        offset += size
        align = max(align, size)
    return {"size": -(-offset // align) * align, "fields": fields}


def parse(text: str) -> dict:
    text = strip_comments(text)
    enums = set(re.findall(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text))
    enums |= set(re.findall(r"\benum\s+(\w+)\s*(?::\s*\w+\s*)?\{", text))
    # int typedefs such as `typedef int32_t tg_status;` classify as their target
    aliases = dict((new, old.strip()) for old, new in re.findall(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", text))
    structs = {name: struct_layout(name, body)
               for body, name in re.findall(r"typedef\s+struct\s*\w*\s*\{([^}]*)\}\s*(\w+)\s*;", text)}
    functions = {}
    for m in re.finditer(r"([A-Za-z_][\w\s\*]*?)\b(tg_\w+)\s*\(([^()]*)\)\s*(?:noexcept\s*)?;", text):
        ret, name, params = m.group(1), m.group(2), m.group(3).strip()

        def resolve(t: str) -> str:
            base = " ".join(QUALIFIERS.sub(" ", t).split()).rstrip("*").strip()
            if "*" not in t and base in aliases:
                return aliases[base]
            return t

        arg_types = [resolve(split_param(p)) for p in params.split(",")] if params and params != "void" else []
        args = [kind(t, enums, f"{name} argument {i + 1}") for i, t in enumerate(arg_types)]
        ret_type = resolve(" ".join(ret.replace("extern", " ").replace('"C"', " ").split()))
        functions[name] = {"result": kind(ret_type, enums, f"{name} result"), "args": args,
                           "c_types": {"result": bare(ret_type), "args": [bare(t) for t in arg_types]}}
    if not functions:
        sys.exit("api_signatures.py: no tg_ function declarations found")
    return {"functions": functions, "structs": structs}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(json.dumps(parse(f.read()), indent=1, sort_keys=True))
