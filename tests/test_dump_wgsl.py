"""webgpu/tools/dump_wgsl.mjs: every WGSL variant the trainer can use, written one file each, and each
file compiled on the Node adapter (npm `webgpu`, Dawn on SwiftShader) by webgpu/tools/compile_wgsl.mjs:
no compilation error, and a compute pipeline made from it."""
from __future__ import annotations

import json
import os
import re
import subprocess

from conftest import ROOT

SWIFTSHADER_ICD = "/usr/lib/chromium/vk_swiftshader_icd.json"


def node(script: str, *args: str) -> dict:
    env = dict(os.environ, VK_ICD_FILENAMES=SWIFTSHADER_ICD)
    r = subprocess.run(["node", str(ROOT / "webgpu/tools" / script), *args], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_dumped_variant_compiles(tmp_path):
    dump = node("dump_wgsl.mjs", str(tmp_path))
    files = sorted(p.name for p in tmp_path.glob("*.wgsl"))
    assert files == sorted(dump["files"])
    print(f"dumped {len(files)} variants ({len(dump['duplicates'])} with duplicate sources skipped)")
    # each file is named after its kernel and holds that kernel's entry point, named as in wasm/src
    for f in files:
        code = (tmp_path / f).read_text()
        assert code.startswith(f"// {f[:-5]}:"), f
        assert len(re.findall(r"@compute", code)) == 1, f
    families = {"matmul_forward", "matmul_backward_input", "matmul_backward_weight", "matmul_pair",
                "matmul_split_final", "layernorm_forward", "layernorm_backward_input", "layernorm_backward_params",
                "embedding_forward", "embedding_backward",
                "cross_entropy_forward", "cross_entropy_backward", "attention_forward",
                "attention_backward", "grad_global_norm_partials", "clip_coefficient",
                "adamw_update"}
    entry_points = {re.search(r"@compute[^\n]*\nfn (\w+)\(", (tmp_path / f).read_text()).group(1) for f in files}
    assert entry_points == families
    compiled = node("compile_wgsl.mjs", str(tmp_path))
    print(f"{compiled['adapter']}: {compiled['compiled']} of {len(files)} variants compiled, "
          f"{len(compiled['failures'])} failed")
    assert compiled["failures"] == []
    assert compiled["compiled"] == len(files)
