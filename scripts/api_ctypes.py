"""ctypes binding of a native libtinygpt.so, built from the C API header by api_signatures.parse (as
the JS wrapper's tinygpt_api.js is), for the Python tests (tests/support/tinygpt_native.py) and the
native benchmark (bench/cpu/native.py): no hand-written signature list to fall out of step.

Pointer arguments are c_void_p (pass numpy's .ctypes.data_as(c_void_p), bytes or None), except a
pointer to one of the header's structs, which takes ctypes.byref(binding.struct(...)); pointer
results are c_char_p for char*, POINTER(scalar) for a scalar pointer, c_void_p otherwise.
"""
from __future__ import annotations

import ctypes as C
from collections.abc import Mapping
from pathlib import Path

from scripts.api_signatures import parse

HEADER = Path(__file__).resolve().parents[1] / "wasm" / "src" / "tinygpt_api.h"
SCALARS = {"void": None, "char": C.c_char, "int": C.c_int, "int8_t": C.c_int8, "uint8_t": C.c_uint8,
           "int16_t": C.c_int16, "uint16_t": C.c_uint16, "int32_t": C.c_int32, "uint32_t": C.c_uint32,
           "int64_t": C.c_int64, "uint64_t": C.c_uint64, "size_t": C.c_size_t, "float": C.c_float,
           "double": C.c_double}


def struct_class(name: str, layout: dict) -> type[C.Structure]:
    cls = type(name, (C.Structure,), {"_fields_": [(f["name"], SCALARS[f["type"]]) for f in layout["fields"]]})
    # ctypes lays the struct out as this platform's C compiler does; the JS side trusts the parsed
    # layout, so the two must agree.
    got = [getattr(cls, f["name"]).offset for f in layout["fields"]], C.sizeof(cls)
    want = [f["offset"] for f in layout["fields"]], layout["size"]
    if got != want:
        raise RuntimeError(f"struct {name}: ctypes layout {got} differs from api_signatures.py's {want}")
    return cls


class Binding:
    """lib: the library, every tg_ function typed; struct(name, values): an instance of a header struct."""

    def __init__(self, lib_path: Path, header: Path = HEADER):
        api = parse(header.read_text())
        self.layouts = api["structs"]
        self.struct_classes = {name: struct_class(name, layout) for name, layout in self.layouts.items()}
        self.lib = C.CDLL(str(lib_path))
        for name, sig in api["functions"].items():
            fn = getattr(self.lib, name)
            fn.restype = self._result(sig["c_types"]["result"])
            fn.argtypes = [self._arg(t) for t in sig["c_types"]["args"]]

    def _arg(self, ctype: str):
        if ctype.endswith("*"):
            cls = self.struct_classes.get(ctype[:-1])
            return C.POINTER(cls) if cls else C.c_void_p
        return SCALARS[ctype]

    def _result(self, ctype: str):
        if ctype == "char*":
            return C.c_char_p
        if ctype.endswith("*"):
            scalar = SCALARS.get(ctype[:-1])
            return C.POINTER(scalar) if scalar else C.c_void_p
        return SCALARS[ctype]

    def struct(self, name: str, values: Mapping) -> C.Structure:
        """Struct `name` with each field taken from values by its key (n_layer from values["nLayer"])."""
        fields = self.layouts[name]["fields"]
        missing = [f["key"] for f in fields if f["key"] not in values]
        if missing:
            raise KeyError(f"{name} needs {', '.join(missing)}")
        return self.struct_classes[name](**{f["name"]: values[f["key"]] for f in fields})
