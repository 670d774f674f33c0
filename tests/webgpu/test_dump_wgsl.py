"""tests/webgpu/hosts/dump_wgsl.mjs: every WGSL variant the trainer can use, written one file each;
tests/webgpu/hosts/null_backend_pipelines.mjs, which makes every variant's compute pipeline on Dawn's Null
backend (Dawn's validation of the WGSL, layout and limits without a GPU compiler: seconds, where SwiftShader's
JIT took minutes); and tests/webgpu/hosts/compile_wgsl.mjs, which compiles such files on the Node adapter
(npm `webgpu`, Dawn on SwiftShader), on a few of them. test_webgpu_kernels.py compiles every variant's shader
module in Chromium too, in the page whose kernel cases make their pipelines on SwiftShader."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import ROOT, swiftshader_env

HOSTS = ROOT / "tests" / "webgpu" / "hosts"
# The limits the Null adapter lacks (it offers WebGPU's defaults: 8 storage buffers, 16 KiB of workgroup memory)
# and the most of each a variant may need: the block-end kernel binds 10 storage buffers (Ops.layernormBackwardBlock),
# and dump_wgsl.mjs records the plans of devices with up to 32 KiB of workgroup memory. The trainer takes such a
# variant only where the device offers that much.
PAST_DEFAULTS = {"maxStorageBuffersPerShaderStage": 10, "maxComputeWorkgroupStorageSize": 32768}


def node(script: str, *args: str, exit_code: int = 0) -> dict:
    env = swiftshader_env()
    r = subprocess.run(["node", str(HOSTS / script), *args], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == exit_code, r.stdout[-4000:] + r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """(the folder, dump_wgsl.mjs's report) of one dump, which each test here reads."""
    outdir = tmp_path_factory.mktemp("wgsl")
    return outdir, node("dump_wgsl.mjs", str(outdir))


def past_their_limits(beyond: list[dict]) -> list[dict]:
    """Of null_backend_pipelines.mjs's beyondLimits, those needing more than PAST_DEFAULTS allows (or another limit)."""
    return [b for b in beyond if any(value > PAST_DEFAULTS.get(limit, 0) for limit, value in b["needs"].items())]


def test_every_variant_is_dumped_and_the_node_compiler_checks_files(dumped, tmp_path):
    outdir, dump = dumped
    files = sorted(p.name for p in outdir.glob("*.wgsl"))
    assert files == sorted(dump["files"])
    print(f"dumped {len(files)} variants ({len(dump['duplicates'])} with duplicate sources skipped)")
    # each file is named after its kernel and holds that kernel's entry point, named as in wasm/src
    for f in files:
        code = (outdir / f).read_text()
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
                "attention_backward", "adamw_update", "lora_down", "lora_grad_partials", "lora_merge_into",
                "lora_grads_sum", "lora_merge"}
    entry_points = {re.search(r"@compute[^\n]*\nfn (\w+)\(", (outdir / f).read_text()).group(1) for f in files}
    assert entry_points == families

    # the Node compiler on three small kernels, and on a broken one
    few = tmp_path / "few"
    few.mkdir()
    for f in ("adamw_update.wgsl", "embedding_backward_norm.wgsl", "embedding_forward.wgsl"):
        (few / f).write_text((outdir / f).read_text())
    compiled = node("compile_wgsl.mjs", str(few))
    print(f"{compiled['adapter']}: {compiled['compiled']} of 3 compiled")
    assert compiled == {"adapter": compiled["adapter"], "compiled": 3, "failures": []}
    (few / "broken.wgsl").write_text("@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }\n")
    broken = node("compile_wgsl.mjs", str(few), exit_code=1)
    assert broken["compiled"] == 3
    assert [f["file"] for f in broken["failures"]] == ["broken.wgsl"] and broken["failures"][0]["errors"]


def test_every_variant_makes_a_pipeline_on_the_null_backend(dumped):
    """Every variant's compute pipeline on Dawn's Null backend, with the trainer's limits and subgroups: what
    Chromium's pipeline creation validates (entry point, layout "auto", limits) without SwiftShader's JIT. The
    variants the trainer takes only past WebGPU's default limits stop at those limits there, and nowhere else."""
    outdir, dump = dumped
    result = node("null_backend_pipelines.mjs", str(outdir))
    beyond = result["beyondLimits"]
    needs = {limit: [b["needs"][limit] for b in beyond if limit in b["needs"]] for limit in PAST_DEFAULTS}
    print(f"{result['adapter']} ({', '.join(result['features'])}; {result['limits']}): {result['made']} pipelines "
          f"made in {result['seconds']} s; past its limits, which the trainer takes only past WebGPU's defaults: "
          + ", ".join(f"{len(v)} variants needing a {limit} of up to {max(v)}" for limit, v in needs.items() if v))
    assert result["failures"] == []
    assert "subgroups" in result["features"]
    assert past_their_limits(beyond) == []
    assert result["made"] + len(beyond) == len(dump["files"])


def test_the_null_backend_fails_a_broken_variant(dumped, tmp_path):
    """A WGSL error (the shader module's) and a pipeline's (a workgroup past the trainer's 256 invocations) fail
    null_backend_pipelines.mjs; a variant needing more workgroup memory than any device the trainer plans for
    is past_their_limits."""
    outdir, _ = dumped
    (tmp_path / "adamw_update.wgsl").write_text((outdir / "adamw_update.wgsl").read_text())
    (tmp_path / "broken_syntax.wgsl").write_text("@compute @workgroup_size(1) fn main() { let x = 1u }\n")
    (tmp_path / "broken_workgroup.wgsl").write_text("@compute @workgroup_size(512) fn main() { }\n")
    (tmp_path / "big_workgroup.wgsl").write_text(
        "var<workgroup> w: array<f32, 8448>;\n@compute @workgroup_size(1) fn main() { w[0] = 1.0; }\n")
    result = node("null_backend_pipelines.mjs", str(tmp_path), exit_code=1)
    assert result["made"] == 1
    assert [f["file"] for f in result["failures"]] == ["broken_syntax.wgsl", "broken_workgroup.wgsl"]
    assert all(f["errors"] for f in result["failures"])
    too_big = {"file": "big_workgroup.wgsl", "needs": {"maxComputeWorkgroupStorageSize": 33792}}
    assert result["beyondLimits"] == [too_big]
    assert past_their_limits(result["beyondLimits"]) == [too_big]
