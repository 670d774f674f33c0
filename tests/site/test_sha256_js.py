"""site/static/js/sha256.js (the fallback for contexts without crypto.subtle) against hashlib, in
Node: every length around the 55/56/64-byte padding edges, random bytes, and the shipped corpus."""
from __future__ import annotations

import hashlib
import json
import random
import subprocess

from conftest import ROOT
from python_ref.config import DEFAULT_CORPUS

MODULE = (ROOT / "site/static/js/sha256.js").as_uri()


def test_matches_hashlib():
    rng = random.Random(5)
    cases = [bytes(rng.randrange(256) for _ in range(n)) for n in [*range(0, 130), 1000, 4095, 65_537]]
    script = (f"import {{ sha256HexSync, sha256Hex }} from {json.dumps(MODULE)};\n"
              "import { readFileSync } from 'node:fs';\n"
              "const cases = JSON.parse(readFileSync(0, 'utf8')).map((h) => Buffer.from(h, 'hex'));\n"
              f"const corpus = readFileSync({json.dumps(str(DEFAULT_CORPUS))});\n"
              "console.log(JSON.stringify({ cases: cases.map((c) => sha256HexSync(c)), corpus: sha256HexSync(corpus),"
              " subtle: await sha256Hex(corpus) }));")
    r = subprocess.run(["node", "--input-type=module", "-e", script], input=json.dumps([c.hex() for c in cases]),
                       capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(r.stdout)
    want = [hashlib.sha256(c).hexdigest() for c in cases]
    mismatches = sum(g != w for g, w in zip(got["cases"], want))
    corpus = hashlib.sha256(DEFAULT_CORPUS.read_bytes()).hexdigest()
    print(f"{len(cases)} inputs, {mismatches} mismatches; corpus {got['corpus'][:16]}... (hashlib {corpus[:16]}...)")
    assert mismatches == 0 and got["corpus"] == corpus == got["subtle"]
