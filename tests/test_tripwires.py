"""The worker's dispatcher tripwire: registrations since the snapshot are seen, a reordered listing is not one."""

import random

import torch
import torch.library

from kbencheval.eval.tripwires import DispatcherSnapshot


def test_nothing_registered_means_no_change():
    assert DispatcherSnapshot({"aten.clone", "aten.empty"}).changes() == []


def test_a_listing_in_another_order_is_no_registration():
    """The fast path compares the lists as the dispatcher returns them; an operator added or removed
    elsewhere may reorder them without a kernel being registered, which must not read as one."""
    snapshot = DispatcherSnapshot({"aten.clone"})
    shuffled = {key: random.Random(1).sample(names, len(names)) for key, names in snapshot.names.items()}
    assert any(shuffled[key] != names for key, names in snapshot.names.items())
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
        assert snapshot.changes() == ["aten::clone", "tf_tripwire_test::relu_like"]  # once, though seen twice
    finally:
        rerouted._destroy()
        defined._destroy()
    assert snapshot.changes() == []
