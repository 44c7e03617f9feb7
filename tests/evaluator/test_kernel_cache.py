"""Kernels the harness compiles from candidates' TTIR (kbencheval/eval/sharing/kernel_cache.py), on the CPU:
Triton compiles for sm_90 without a GPU, so the lookup, the sandboxed compile and the keys are real."""

from __future__ import annotations

import importlib.util
import os
import tempfile

import pytest

triton = pytest.importorskip("triton")

from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler.compiler import ASTSource  # noqa: E402

from kbencheval.eval import EvalConfig  # noqa: E402
from kbencheval.eval.sharing.kernel_cache import (FOLDER_ENV, VARYING, KernelCompiler, KernelLookup,  # noqa: E402
                                          checked_report, strip_locations)
from kbencheval.eval.processes.server import CompileServer  # noqa: E402

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)
'''
SM90 = GPUTarget("cuda", 90, 32)


def candidate_kernel(folder, name="candidate"):
    """`double` from a file of its own, as each candidate's kernel is (its locations name that file)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write(KERNEL)
    spec = importlib.util.spec_from_file_location(f"kc_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.double


def compile_for_sm90(fn, block=1024, **options):
    """A fresh private cache each time, as each worker has."""
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    source = ASTSource(fn, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": block})
    return triton.compile(source, target=SM90, options=options)


@pytest.fixture
def lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compile_for_sm90 sets it anew; restored after
    found = KernelLookup(str(tmp_path / "kernels"))
    os.makedirs(found.folder)
    found.install()
    yield found
    knobs.runtime.add_stages_inspection_hook = None


def test_locations_are_stripped_and_strings_kept():
    text = ('#loc = loc("/job1/candidate.py":3:0)\nmodule {\n  tt.func public @k(%x: i32 loc("x"(#loc))) {\n'
            '    tt.print " loc(kept)" {hex = false} : %x : i32 loc(#loc1)\n  } loc(#loc)\n} loc(#loc)\n'
            '#loc1 = loc("/job1/candidate.py":4:5)')
    stripped = strip_locations(text)
    assert "job1" not in stripped and "#loc" not in stripped and '" loc(kept)"' in stripped
    assert "tt.func public @k(%x: i32) {" in stripped and strip_locations(stripped) == stripped


@pytest.mark.parametrize("report", [
    None, [], {"ttir": 1, "options": {}}, {"ttir": "module {}"},
    {"ttir": "module {}", "options": {**dict.fromkeys(VARYING), "num_warps": 3}},  # every option must check
    {"ttir": "module {}", "options": {"num_warps": 4}},  # all of VARYING's names, no fewer
    {"ttir": "x" * (2 << 20), "options": {}},
])
def test_malformed_reports_are_not_compiled(report):
    assert checked_report(report) is None


def test_a_kernel_compiled_for_one_candidate_serves_another(lookup, tmp_path):
    first = compile_for_sm90(candidate_kernel(tmp_path / "job1"))
    [report] = lookup.misses
    assert lookup.hits == 0 and set(report["options"]) == set(VARYING) and "job1" not in report["ttir"]
    compiler = KernelCompiler(lookup.folder, lambda: CompileServer(EvalConfig(device="cpu"), []), 90)
    try:
        [future] = compiler.request([report])
        entry = future.result(timeout=300)
        assert entry and compiler.compiled == 1
        [again] = compiler.request([report])
        assert again.result(timeout=60) is None and compiler.compiled == 1  # asked before: not compiled again
        [broken] = compiler.request([{"ttir": "module { not mlir", "options": report["options"]}])
        assert broken.result(timeout=300) is None and compiler.failures == 1
        assert sorted(os.listdir(lookup.folder)) == [os.path.basename(entry)]  # nothing half-made kept

        second = compile_for_sm90(candidate_kernel(tmp_path / "job2"))  # the same kernel, another file
        assert lookup.hits == 1 and len(lookup.misses) == 1
        with open(os.path.join(entry, "kernel.cubin"), "rb") as f:
            assert second.asm["cubin"] == f.read()
        assert (second.metadata.name, second.metadata.shared, second.metadata.num_warps) == \
            (first.metadata.name, first.metadata.shared, first.metadata.num_warps)

        compile_for_sm90(candidate_kernel(tmp_path / "job3"), block=512)  # another kernel: a miss
        compile_for_sm90(candidate_kernel(tmp_path / "job4"), num_warps=8)  # other options: a miss
        assert lookup.hits == 1 and len(lookup.misses) == 3
    finally:
        compiler.close()


def test_options_beyond_the_varying_ones_are_neither_looked_up_nor_reported(lookup, tmp_path):
    compile_for_sm90(candidate_kernel(tmp_path / "job"), ptx_options="-v")
    assert lookup.hits == 0 and lookup.misses == []


@pytest.mark.parametrize("kind, layers, offered", [
    ("candidate", ["landlock-fs", "seccomp"], True), ("candidate", ["ro-root"], True),
    ("candidate", ["seccomp", "no-caps"], False), ("judge", ["landlock-fs"], False), ("compile", ["ro-root"], False)])
def test_the_folder_only_for_candidates_that_cannot_write_it(kind, layers, offered, tmp_path, monkeypatch):
    from kbencheval.eval.processes import forkserver

    monkeypatch.setattr(os, "environ", dict(os.environ))  # job_env sets a worker's environment
    monkeypatch.setattr(tempfile, "tempdir", tempfile.gettempdir())
    plan = {"shared_cache": str(tmp_path / "judge"), "kernel_cache": str(tmp_path / "kernels")}
    forkserver.job_env({"job_dir": str(tmp_path / "job"), "kind": kind}, plan, layers)
    assert os.environ.get(FOLDER_ENV) == (plan["kernel_cache"] if offered else None)


def test_a_compile_cut_short_by_exit_prints_nothing(tmp_path, capsys):
    compiler = KernelCompiler(str(tmp_path), lambda: CompileServer(EvalConfig(device="cpu"), []), 90)
    compiler._failed(RuntimeError("fork server stopped answering"))
    assert "was not compiled for the workers" in capsys.readouterr().err
    compiler.failures = 0
    compiler.close()  # at exit: the server goes, and with it any compile in flight
    compiler._failed(RuntimeError("fork server exited"))
    assert capsys.readouterr().err == "" and compiler.failures == 1
