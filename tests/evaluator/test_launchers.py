"""Launchers the harness builds for candidates' kernels (kbencheval/eval/sharing/launchers.py), on the CPU: a
kernel compiled for an H100 (sm_90, which needs no GPU) reports its argument types, the harness checks
and builds them (against a stand-in libcuda, since this machine has none), and Triton's own launcher
code in a later worker finds that build through the layered cache. Reports that are not Triton types
build nothing. The launcher's run on the device is a GPU test (test_gpu_harness.py)."""

from __future__ import annotations

import os
import subprocess
import sysconfig
import threading

import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia.driver")

from kbencheval.eval.sharing import launchers  # noqa: E402
from kbencheval.eval.sharing.compile_aside import CompileAside  # noqa: E402
from kbencheval.eval.processes.sandbox.tritoncache import MANAGER, SHARED_ENV, LayeredCacheManager  # noqa: E402

SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def scaled_mul(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, scale * tl.load(x_ptr + offs, mask=m) * tl.load(y_ptr + offs, mask=m), mask=m)
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """scaled_mul compiled for sm_90 (Triton's jit needs its source in a file)."""
    import importlib.util

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    folder = tmp_path_factory.mktemp("kernel")
    (folder / "scaled_mul.py").write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("scaled_mul", folder / "scaled_mul.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(folder / "cache")
    try:
        signature = {"x_ptr": "*fp32", "y_ptr": "*fp16", "out_ptr": "*fp32", "n": "i32", "scale": "fp32",
                     "BLOCK": "constexpr"}
        return triton.compile(ASTSource(module.scaled_mul, signature, constexprs={"BLOCK": 256}),
                              target=GPUTarget("cuda", 90, 32))
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR")
        else:
            os.environ["TRITON_CACHE_DIR"] = before


@pytest.fixture
def stand_in_libcuda(tmp_path, monkeypatch):
    """An empty libcuda.so.1 to link against: the build links, it never loads here."""
    (tmp_path / "empty.c").write_text("")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(tmp_path / "empty.c")],
                   check=True)
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(tmp_path))
    from triton.backends.nvidia import driver

    driver.libcuda_dirs.cache_clear()
    yield
    driver.libcuda_dirs.cache_clear()


def test_the_worker_reports_its_kernels_argument_types(kernel):
    aside = CompileAside(chan=None, device=None)
    aside.load(kernel)  # no driver here: the launcher fails to load, as Triton keeps for the first launch
    aside.load(kernel)
    assert aside.launcher_types == [["*fp32", "*fp16", "*fp32", "i32", "fp32", "constexpr"]]


@pytest.mark.parametrize("report", [
    None, "i32", [], ["i32"] * 65, [["i32"]], [1], ["i32; abort();"], ["*fp32\n"], ["*fp32 */ int x; /*"],
    ["nvTmaDesc"], ["tensordesc<fp32[16, 16]>"], ["i128"], ["*" + "a" * 13],
])
def test_only_tritons_types_are_built(report, tmp_path):
    assert launchers.checked_types(report) is None
    assert launchers.LauncherBuilder(str(tmp_path)).request([report]) == []
    assert list(tmp_path.iterdir()) == []


def test_a_later_workers_launcher_is_the_harness_build(kernel, stand_in_libcuda, tmp_path, monkeypatch):
    """Built once from the first worker's report; Triton's CudaLauncher in a later worker (its private
    cache empty) loads that file and builds nothing."""
    from triton.backends.nvidia import driver
    from triton.runtime import build

    builder = launchers.LauncherBuilder(str(tmp_path / "launchers"))
    (tmp_path / "launchers").mkdir()
    reported = [list(kernel.src.signature.values())]
    built = [f.result() for f in builder.request(reported + reported)]  # the same types once
    assert len(built) == 1 and built[0] and os.path.getsize(built[0]) > 0, builder.failures
    assert builder.request(reported) == []  # done already
    other_pointees = [["*bf16" if t.startswith("*") else t for t in reported[0]]]
    assert [f.result() for f in builder.request(other_pointees)] == built  # the same C: built once
    assert len(builder.asked) == 2 and len(builder.built) == 1

    loaded = []
    monkeypatch.setattr(build, "_build", lambda *a, **k: pytest.fail("the worker built its own launcher"))
    monkeypatch.setattr(build, "_load_module_from_path", lambda name, path: loaded.append(path) or
                        type("Module", (), {"launch": None}))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "private"))
    monkeypatch.setenv("TRITON_CACHE_MANAGER", MANAGER)
    monkeypatch.setenv(SHARED_ENV, os.pathsep.join([str(tmp_path / "judge"), builder.folder]))
    driver.CudaLauncher(kernel.src, kernel.metadata)
    assert loaded == built


def test_shared_layers_are_read_in_order(tmp_path, monkeypatch):
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for layer in ("first", "second"):
        (tmp_path / layer / "KEY").mkdir(parents=True)
        (tmp_path / layer / "KEY" / f"b{suffix}").write_text(layer)
    (tmp_path / "first" / "KEY" / f"b{suffix}").unlink()
    (tmp_path / "first" / "KEY" / "a").write_text("first")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "private"))
    monkeypatch.setenv(SHARED_ENV, os.pathsep.join([str(tmp_path / "first"), str(tmp_path / "second")]))
    cache = LayeredCacheManager("KEY")
    assert cache.get_file("a") == str(tmp_path / "first" / "KEY" / "a")
    assert cache.get_file(f"b{suffix}") == str(tmp_path / "second" / "KEY" / f"b{suffix}")
    assert cache.get_file("c") is None


@pytest.mark.parametrize("layers, offered", [(["landlock-fs", "seccomp"], True), (["ro-root"], True),
                                             (["seccomp", "no-caps"], False), ([], False)])
def test_the_launcher_layer_only_for_workers_that_cannot_write_it(layers, offered, tmp_path, monkeypatch):
    import tempfile

    from kbencheval.eval.processes import forkserver

    monkeypatch.setattr(os, "environ", dict(os.environ))  # job_env sets a worker's environment
    monkeypatch.setattr(tempfile, "tempdir", tempfile.gettempdir())
    plan = {"shared_cache": str(tmp_path / "judge"), "launcher_cache": str(tmp_path / "launchers")}
    forkserver.job_env({"job_dir": str(tmp_path / "job"), "kind": "worker"}, plan, layers)
    expected = [plan["shared_cache"]] + ([plan["launcher_cache"]] if offered else [])
    assert os.environ[SHARED_ENV].split(os.pathsep) == expected


def test_builds_at_exit_are_dropped_without_a_message(tmp_path, capsys, monkeypatch):
    """An eval's process exits with builds still queued: they are dropped, and a failure then prints nothing
    (on the H200 the linker's 'cannot open output file' followed every `kbench eval`)."""
    from kbencheval.eval.sharing import background, launchers

    monkeypatch.setattr(background, "EXITING", threading.Event())
    monkeypatch.setattr(launchers, "EXITING", background.EXITING)
    builder = launchers.LauncherBuilder(str(tmp_path))
    builder._failed(RuntimeError("before exit"))
    assert "could not be built" in capsys.readouterr().err  # while running, a failure is news
    builder.failures = 0
    builder.finish(timeout_s=5)
    assert background.EXITING.is_set()
    started = []
    monkeypatch.setattr(launchers, "launcher_source", lambda types: started.append(types) or ("", "key"))
    assert builder._build(("*fp32", "i32")) is None and started == []  # a build queued at exit does not start
    builder._failed(RuntimeError("folder gone"))
    assert capsys.readouterr().err == ""
