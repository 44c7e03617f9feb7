"""benchmarks/kernel_profile.py: kernel names to categories, busy time as the union of intervals, the host gap.
    pytest tests/bench/test_kernel_profile.py"""

from __future__ import annotations

import pytest

from benchmarks.kernel_profile import category, summarize, union_ms


@pytest.mark.parametrize("name, expected", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT", "matmul"),
    ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
    ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", "attention"),  # attention wins over its cutlass name
    ("void at::native::(anonymous namespace)::fused_adamw_kernel", "optimizer_and_clip"),
    ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<1>>", "optimizer_and_clip"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax_and_loss"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl"),
    ("Memcpy DtoH (Device -> Pageable)", "copy_and_cast"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
    ("some_unknown_kernel", "other"),
])
def test_kernel_names_fall_into_their_category(name, expected):
    assert category(name) == expected


def test_busy_time_is_the_union_of_overlapping_kernels():
    assert union_ms([]) == 0.0
    assert union_ms([(0, 1000), (500, 1500), (3000, 4000)]) == pytest.approx(2.5)  # 0-1.5 ms and 3-4 ms
    assert union_ms([(0, 4000), (1000, 2000)]) == pytest.approx(4.0)  # nested


def test_summary_splits_wall_time_into_categories_busy_and_gap():
    kernels = [("gemm_a", 0, 4000), ("flash_fwd", 4000, 6000), ("ncclAllReduce", 5000, 7000), ("gemm_a", 9000, 10000)]
    s = summarize(kernels, wall_ms=12.0)
    assert s["ms_by_category"] == {"matmul": 5.0, "attention": 2.0, "nccl": 2.0}
    assert s["busy_ms"] == pytest.approx(8.0)  # 0-7 and 9-10: the NCCL overlap counted once
    assert s["host_gap_ms"] == pytest.approx(4.0)
    assert s["heaviest_kernels"][0] == {"name": "gemm_a", "ms": 5.0}


def test_throughput_variants_parse_backend_and_knobs():
    from benchmarks.train_throughput import parse_variant

    assert parse_variant("megatron") == ("megatron", {})
    assert parse_variant("torch:fused_optimizer=false,micro_batch_tokens=16384") == (
        "torch", {"fused_optimizer": False, "micro_batch_tokens": 16384})
    with pytest.raises(SystemExit, match="megatron or torch"):
        parse_variant("jax:lr=1")
    with pytest.raises(SystemExit, match="key=value"):
        parse_variant("torch:fused_optimizer")
    with pytest.raises(SystemExit, match="no train key fused_optimiser in backend torch"):
        parse_variant("torch:fused_optimiser=false")
    assert parse_variant("megatron:tp=1") == ("megatron", {"tp": 1})
