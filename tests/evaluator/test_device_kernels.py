"""Device-side attribution on the CPU: which kernel names count as the candidate's, and how the harness
judges a worker's kernel report. The enumeration itself (graph nodes, profiler) needs a GPU:
tests/evaluator/test_gpu_harness.py."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from kbencheval.eval.contract.device_kernels import KernelNodeParams, check_report, device_report, kernel_class, kernel_violation
from kbencheval.eval.contract.protocol import Outputs, ProtocolError, Status

# Triton names a kernel after its Python function; plain words like gemm or flash are fair names.
TRITON = ["add_kernel", "fused_softmax_kernel", "matmul_kernel", "gemm_kernel", "my_gemm", "flash_fwd_kernel",
          "triton_add_kernel", "winograd_conv_kernel", "_layer_norm_fwd"]
# ATen kernels behind allocation and copies, as a graph node names them (mangled) and as the profiler does.
MEMORY_ONLY = [
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_kernel_cudaERNS_18"
    "TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlfE_EEvS4_RKT_EUliE_EEviT1_",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>>",
    "_ZN2at6native54_GLOBAL__N__d1f6a7c0_22_RangeFactories_cu_ba8bc4f5_1990529elementwise_kernel_with_indexIiZZZNS0_"
    "15arange_cuda_outERKN3c106ScalarES6_S6_RNS_6TensorEENKUlvE_clEvENKUlvE2_clEvEUllE_EEvT_T0_",
]
ATEN_COMPUTE = [
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_",
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_15GeluCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluType"
    "EENKUlvE0_clEvENKUlvE_clEvEUlfE_St5arrayIPcLm2EEEEviT0_T1_",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, unsigned int, float, 4, 4>)",
    "_ZN3cub17CUB_200200_800_NS6detail11EmptyKernelIvEEvv",
]
CUBLAS = [
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "nvjet_tst_128x64_64x8_1x2_h_bz_NNT",
    "ampere_sgemm_128x64_nn",
    "_Z17gemv2T_kernel_valIiiffffLi128ELi16ELi4ELi4ELb0ELb0E18cublasGemvParamsExIiPKfS2_PfEEvT6_T4_S6_",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_64x1_tn_align8>(cutlass_80_wmma_tensorop_"
    "s161616gemm_f16_32x32_64x1_tn_align8::Params)",
]
CUDNN = ["_ZN5cudnn19engines_precompiled16nchwToNhwcKernelIfffLb0ELb1EL21cudnnKernelDataType_t0EEEvNS0_18nchw2nhwc"
         "_params_tIT1_EEPKT_PT0_",
         "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float*)"]
INDUCTOR = ["triton_poi_fused_relu_0", "triton_red_fused_sum_1", "triton_per_fused__softmax_0", "triton_tem_fused_mm_0"]


def test_triton_kernels_and_memory_only_aten_kernels_are_the_candidates():
    for name in TRITON + MEMORY_ONLY:
        assert kernel_class(name) is None, name
    assert kernel_violation(TRITON + MEMORY_ONLY, []) is None


def test_library_compute_is_rejected_and_named():
    for names, cls in ((ATEN_COMPUTE, "torch (ATen)"), (CUBLAS[:4], "cuBLAS"), (INDUCTOR, "torch.compile (Inductor)")):
        for name in names:
            assert kernel_class(name) == cls, name
            reason = kernel_violation(["relu_kernel", name], [])
            assert reason.startswith(f"the device ran a {cls} kernel (") and "does not allow" in reason, reason
    assert kernel_class(CUBLAS[4]) == "CUTLASS"
    assert all(kernel_class(name) == "cuDNN" for name in CUDNN)
    long_name = kernel_violation([CUBLAS[0]], [])
    assert "sm90_xmma_gemm_f32f32" in long_name and len(long_name) < 160  # truncated in the reason


def test_any_other_cpp_kernel_is_not_a_triton_candidates():
    """A Triton candidate cannot produce a C++ name, whatever the library behind it."""
    for name in ("_Z14some_lib_kernelPfS_i", "void radix_sort_kernel<float>(float*)", "ns::kernel(int)"):
        assert kernel_class(name) == "non-Triton C++", name
        assert kernel_class(name, backend="cuda") is None  # a load_inline candidate writes such kernels itself
    assert kernel_class(ATEN_COMPUTE[0], backend="cuda") == "torch (ATen)"
    assert kernel_class(CUBLAS[0], backend="cuda") == "cuBLAS"


def test_allowed_ops_widen_to_their_library():
    gemm = CUBLAS + [ATEN_COMPUTE[0]]  # cuBLAS, and a linear's bias add
    assert kernel_violation(gemm, []) is not None
    for op in ("aten.mm", "aten.matmul", "linear", "aten.addmm.default"):
        assert kernel_violation(gemm, [op]) is None, op
    assert "cuDNN" in kernel_violation(CUDNN, ["aten.mm"])
    assert kernel_violation(CUDNN + CUBLAS + ATEN_COMPUTE, ["aten.convolution"]) is None  # bundled conv problems
    assert "cuBLAS" in kernel_violation(CUBLAS, ["aten.relu"])  # another op allows ATen only
    assert kernel_violation(ATEN_COMPUTE, ["aten.relu"]) is None
    for allowed in ([], ["aten.mm"], ["aten.convolution"], ["aten.relu"]):  # torch.compile is never a problem's op
        assert "Inductor" in kernel_violation(INDUCTOR, allowed)


def test_graph_nodes_other_than_kernels_and_copies():
    assert kernel_violation(["relu_kernel"], [], nodes={"kernel": 1, "memcpy": 2, "memset": 1, "graph": 1}) is None
    assert "host callback" in kernel_violation(["relu_kernel"], [], nodes={"kernel": 1, "host": 1})
    assert "conditional" in kernel_violation(["relu_kernel"], [], nodes={"kernel": 1, "conditional": 1})
    assert "type42" in kernel_violation([], [], nodes={"type42": 1})  # a node type this code does not know


def test_report_shape_and_failed_enumeration():
    ok = {"source": "graph", "kernels": {"relu_kernel": 1}, "nodes": {"kernel": 1}}
    assert check_report(ok) == "" and check_report({"source": "profiler", "error": "no CUPTI"}) == ""
    for bad in (None, {}, {"source": "cpu"}, {"source": "graph", "kernels": ["relu_kernel"]},
                {"source": "graph", "kernels": {"relu_kernel": 0}}, {"source": "graph", "nodes": {"kernel": "1"}},
                {"source": "graph", "error": 3}, {"source": "graph", "nodes": {"kernel": 1}}):
        assert check_report(bad) != "", bad

    def broken():
        raise OSError("libcuda.so.1: cannot open shared object file")

    assert device_report("graph", broken) == \
        {"source": "graph", "error": "OSError: libcuda.so.1: cannot open shared object file"}
    assert device_report("graph", lambda: (["a", "b", "a"], {"kernel": 3})) == \
        {"source": "graph", "kernels": {"a": 2, "b": 1}, "nodes": {"kernel": 3}}


def test_kernel_node_params_have_cudas_layout():
    """CUDA_KERNEL_NODE_PARAMS_v2: a pointer, seven unsigned ints, then four pointers (8-byte aligned)."""
    assert ctypes.sizeof(KernelNodeParams) == 72
    assert KernelNodeParams.kern.offset == 56 and KernelNodeParams.ctx.offset == 64


# --- the harness's side: Session.check_device_kernels -------------------------------------------------------


def _session(on_cpu=False, allowed_ops=()):
    from kbencheval.eval.trusted.session import Session

    session = Session.__new__(Session)
    session.checks, session.kernels = {}, {}
    session.handles = SimpleNamespace(cfg=SimpleNamespace(on_cpu=on_cpu))
    session.job = SimpleNamespace(allowed_ops=list(allowed_ops), backend="triton")
    return session


def _setup(device_kernels=None, **timing) -> Outputs:
    if device_kernels is not None:
        timing["device_kernels"] = device_kernels
    return Outputs(phase="timing_setup", items=[], timing={"mechanism": "cuda_graph", **timing})


GRAPH = {"source": "graph", "kernels": {"relu_kernel": 1}, "nodes": {"kernel": 1}}


def test_a_gpu_worker_that_omits_its_kernels_breaks_the_protocol():
    with pytest.raises(ProtocolError, match="timing_setup reply lists no device kernel report"):
        _session().check_device_kernels(_setup())
    with pytest.raises(ProtocolError):
        _session().check_device_kernels(Outputs(phase="timing_setup", items=[], timing=None))
    with pytest.raises(ProtocolError):
        _session().check_device_kernels(_setup({"source": "graph", "kernels": "relu_kernel"}))
    assert _session(on_cpu=True).check_device_kernels(_setup()) == ""  # the interpreter runs no device kernels


def test_the_harness_rejects_library_kernels_and_records_what_ran():
    from kbencheval.eval.trusted.session import Verdict

    session = _session()
    assert session.check_device_kernels(_setup(GRAPH), reference=GRAPH) == "graph"
    assert session.checks["device_kernels"] == {"source": "graph", "kernels": {"relu_kernel": 1}, "nodes": {"kernel": 1}}
    assert session.checks["reference_kernels"] == {"relu_kernel": 1}
    cheat = {"source": "graph", "kernels": {"matmul_kernel": 1, CUBLAS[0]: 1}, "nodes": {"kernel": 2}}
    with pytest.raises(Verdict) as caught:
        _session().check_device_kernels(_setup(cheat))
    result = caught.value.result
    assert result.status == Status.REJECTED and "the device ran a cuBLAS kernel" in result.error
    assert "in its timed graph" in result.error and CUBLAS[0][:160] in result.checks["device_kernels"]["kernels"]
    assert _session(allowed_ops=["aten.mm"]).check_device_kernels(_setup(cheat)) == "graph"
    eager = {"source": "profiler", "kernels": {"relu_kernel": 1, "ampere_sgemm_128x64_nn": 1}, "nodes": {"kernel": 2}}
    with pytest.raises(Verdict, match="in a profiled call"):
        _session().check_device_kernels(_setup(eager))


def test_a_failed_enumeration_is_recorded_and_rejected_only_where_the_judges_worked():
    from kbencheval.eval.trusted.session import Verdict

    failed = {"source": "graph", "error": "DeviceKernelsError: cuFuncGetName returned 500 (CUDA_ERROR_NOT_FOUND)"}
    session = _session()
    assert session.check_device_kernels(_setup(failed), reference=None) == "graph"  # e.g. ROCm: no promise, no verdict
    assert session.checks["device_kernels"]["error"] == failed["error"]
    assert _session().check_device_kernels(_setup(failed), reference={"source": "graph", "error": "x"}) == "graph"
    with pytest.raises(Verdict, match="though the reference's could") as caught:
        _session().check_device_kernels(_setup(failed), reference=GRAPH)
    assert caught.value.result.status == Status.REJECTED
    profiler_failed = {"source": "profiler", "error": "DeviceKernelsError: the profiler recorded no kernel"}
    assert _session().check_device_kernels(_setup(profiler_failed), reference=GRAPH) == "profiler"
