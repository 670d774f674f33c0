#!/usr/bin/env python3
"""Reads the tg_ C API declarations from a header and prints them as JSON for the JS wrapper.

The JS side must know, for every argument and result, whether it is pointer-sized (BigInt in the
Memory64 build, Number in the others), a 64-bit integer (BigInt in every build, -sWASM_BIGINT),
or a plain 32-bit/float value (Number). Deriving that from the header, instead of keeping a second
hand-written list in JS, means an API change cannot silently desynchronise the two.

Output: {"functions": {"tg_name": {"result": K, "args": [K, ...]}}} with K one of
  "p" pointer or size_t/ptrdiff_t, "j" int64_t/uint64_t, "i" 32-bit int/bool/enum, "f" float/double,
  "v" void (result only).
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


def parse(text: str) -> dict:
    text = strip_comments(text)
    enums = set(re.findall(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text))
    enums |= set(re.findall(r"\benum\s+(\w+)\s*(?::\s*\w+\s*)?\{", text))
    # int typedefs such as `typedef int32_t tg_status;` classify as their target
    aliases = dict((new, old.strip()) for old, new in re.findall(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", text))
    functions = {}
    for m in re.finditer(r"([A-Za-z_][\w\s\*]*?)\b(tg_\w+)\s*\(([^()]*)\)\s*(?:noexcept\s*)?;", text):
        ret, name, params = m.group(1), m.group(2), m.group(3).strip()

        def resolve(t: str) -> str:
            base = " ".join(QUALIFIERS.sub(" ", t).split()).rstrip("*").strip()
            if "*" not in t and base in aliases:
                return aliases[base]
            return t

        args = []
        if params and params != "void":
            for i, p in enumerate(params.split(",")):
                args.append(kind(resolve(split_param(p)), enums, f"{name} argument {i + 1}"))
        ret_tokens = ret.replace("extern", " ").replace('"C"', " ").split()
        functions[name] = {"result": kind(resolve(" ".join(ret_tokens)), enums, f"{name} result"),
                           "args": args}
    if not functions:
        sys.exit("api_signatures.py: no tg_ function declarations found")
    return {"functions": functions}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(json.dumps(parse(f.read()), indent=1, sort_keys=True))
