"""webgpu/bench/torch_profile.py (the profile itself needs a CUDA GPU; run_device.sh's machine): the kernel
groups that are set beside the WGSL trainer's, checked on kernel names PyTorch's best step ran on an H100."""
from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "webgpu/bench"))
from torch_profile import group_of  # noqa: E402

NAMES = {
    "fmha_cutlassB_f32_aligned_64x64_k32_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80>)":
        "attention",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel":
        "matmul",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(cutlass_80_simt_sgemm_64x64_8x5_nt_align1)":
        "matmul",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float>": "matmul",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>": "matmul",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedAdam>":
        "adamw and clip",
    "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>": "adamw and clip",
    "triton_per_fused_native_layer_norm_backward_view_3": "fused elementwise (triton)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>": "other",
}


def test_kernel_groups():
    for name, group in NAMES.items():
        print(f"{group_of(name):28} {name[:70]}")
        assert group_of(name) == group, name
