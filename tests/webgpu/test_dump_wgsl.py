"""tests/webgpu/hosts/dump_wgsl.mjs: every WGSL variant the trainer can use, written one file each; and
tests/webgpu/hosts/compile_wgsl.mjs, which compiles such files on the Node adapter (npm `webgpu`, Dawn on
SwiftShader), on a few of them. Every variant is compiled in Chromium by test_webgpu_kernels.py, in the
page that has already compiled most of them for its kernel cases."""
from __future__ import annotations

import json
import re
import subprocess

from conftest import ROOT, swiftshader_env

HOSTS = ROOT / "tests" / "webgpu" / "hosts"


def node(script: str, *args: str, exit_code: int = 0) -> dict:
    env = swiftshader_env()
    r = subprocess.run(["node", str(HOSTS / script), *args], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == exit_code, r.stdout[-4000:] + r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_variant_is_dumped_and_the_node_compiler_checks_files(tmp_path):
    dump = node("dump_wgsl.mjs", str(tmp_path))
    files = sorted(p.name for p in tmp_path.glob("*.wgsl"))
    assert files == sorted(dump["files"])
    print(f"dumped {len(files)} variants ({len(dump['duplicates'])} with duplicate sources skipped)")
    # each file is named after its kernel and holds that kernel's entry point, named as in wasm/src
    for f in files:
        code = (tmp_path / f).read_text()
        assert code.startswith(f"// {f[:-5]}:"), f
        assert len(re.findall(r"@compute", code)) == 1, f
    families = {"matmul_forward", "matmul_backward_input", "matmul_backward_weight", "matmul_pair", "matmul_group",
                "matmul_split_final", "matvec_forward", "layernorm_forward", "layernorm_backward_input",
                "layernorm_backward_params",
                "layernorm_backward",
                "embedding_forward", "embedding_backward_norm",
                "cross_entropy_forward", "cross_entropy_backward", "attention_forward",
                "attention_decode", "attention_decode_qkv", "mlp_decode", "logits_decode", "sample_decode",
                "decode_tokens",
                "attention_backward", "adamw_update", "lora_grad_partials", "lora_merge_into", "lora_grads_sum",
                "lora_merge"}
    entry_points = {re.search(r"@compute[^\n]*\nfn (\w+)\(", (tmp_path / f).read_text()).group(1) for f in files}
    assert entry_points == families

    # the Node compiler on three small kernels, and on a broken one
    few = tmp_path / "few"
    few.mkdir()
    for f in ("adamw_update.wgsl", "embedding_backward_norm.wgsl", "embedding_forward.wgsl"):
        (few / f).write_text((tmp_path / f).read_text())
    compiled = node("compile_wgsl.mjs", str(few))
    print(f"{compiled['adapter']}: {compiled['compiled']} of 3 compiled")
    assert compiled == {"adapter": compiled["adapter"], "compiled": 3, "failures": []}
    (few / "broken.wgsl").write_text("@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }\n")
    broken = node("compile_wgsl.mjs", str(few), exit_code=1)
    assert broken["compiled"] == 3
    assert [f["file"] for f in broken["failures"]] == ["broken.wgsl"] and broken["failures"][0]["errors"]
