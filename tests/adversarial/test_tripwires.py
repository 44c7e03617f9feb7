"""The worker's dispatcher tripwire: operators added and allowed ops rerouted since the snapshot are seen,
a reordered listing is not a change.

Threat table (docs/evaluator.md): "custom kernels did the work" (CPU: the dispatcher comparison, a tripwire)."""

import random

import torch
import torch.library

from kbencheval.eval.untrusted.tripwires import DispatcherSnapshot


def test_nothing_registered_means_no_change():
    assert DispatcherSnapshot({"aten.clone", "aten.empty"}).changes() == []


def test_a_listing_in_another_order_is_no_registration():
    """The fast path compares the listing as the dispatcher returns it; a listing in another order with
    the same operators must not read as a change."""
    snapshot = DispatcherSnapshot({"aten.clone"})
    shuffled = random.Random(1).sample(snapshot.names, len(snapshot.names))
    assert shuffled != snapshot.names
    snapshot.names = shuffled
    assert snapshot.changes() == []


def test_a_new_kernel_and_a_rerouted_allowed_op_are_reported():
    snapshot = DispatcherSnapshot({"aten.clone"})
    defined = torch.library.Library("tf_tripwire_test", "DEF")
    rerouted = torch.library.Library("aten", "IMPL")
    try:
        defined.define("relu_like(Tensor x) -> Tensor")
        defined.impl("relu_like", lambda x: x.clamp(min=0), "CPU")
        assert snapshot.changes() == ["tf_tripwire_test::relu_like"]
        rerouted.impl("clone", lambda x, memory_format=None: x.clamp(min=0), "CPU")
        assert snapshot.changes() == ["aten::clone", "tf_tripwire_test::relu_like"]
    finally:
        rerouted._destroy()
        defined._destroy()
    assert snapshot.changes() == []


def test_a_module_is_patched_when_it_is_imported_not_before(tmp_path, monkeypatch):
    """The launch tracker wraps cpp_extension's load_inline only once something imports it."""
    import sys

    from kbencheval.eval.untrusted.recorders import when_imported

    (tmp_path / "kb_lazy_probe.py").write_text("def load_inline():\n    return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    patched = []
    when_imported("kb_lazy_probe", lambda m: patched.append(m) or setattr(m, "load_inline", lambda: "wrapped"))
    assert patched == [] and "kb_lazy_probe" not in sys.modules
    try:
        from kb_lazy_probe import load_inline

        assert load_inline() == "wrapped" and len(patched) == 1
        when_imported("kb_lazy_probe", patched.append)  # already imported: patched at once
        assert patched[-1] is sys.modules["kb_lazy_probe"] and len(patched) == 2
    finally:
        sys.modules.pop("kb_lazy_probe", None)
