"""python -m pytest tests/smart/test_tensor_payloads.py -q

/update_weights_from_tensor's payloads (kbencheval.llm.weight_transfer) on their own: each transport
decodes to the tensors sent; crafted payloads from the network are refused with one line, run nothing
and load nothing (against a real `kbench serve` process); the transport an engine picks per server; and,
on a GPU only, CUDA IPC payloads load what the same weights sent by value load. Helpers and the
end-to-end syncs: tests/smart/test_weight_sync.py.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import threading
import uuid

import pytest
import requests

torch = pytest.importorskip("torch")
pytest.importorskip("ray")

from kbencheval.llm import weight_transfer as wt  # noqa: E402
from kbencheval.llm.weight_transfer import encode_bytes  # noqa: E402
from smart.rollout.engines.weight_sync import StagedPlan, pick_transport, push_tensors  # noqa: E402
from tests.support import kbench_server  # noqa: E402
# `server` and `reference` are fixtures (module-scoped: this module gets its own server and engine).
from tests.smart.test_weight_sync import (assert_serves, expected_logprobs, perturbed, reference, served_logprobs,  # noqa: E402,F401
                                    server, server_version, tensor_post)


def test_payloads_decode_to_the_tensors_sent():
    """Each transport's payload decodes to tensors equal to the sent ones: dtypes (bf16 too), shapes
    (0-d, empty), and views sent by value (not their whole storage)."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    named = [("bf16", torch.randn(3, 5).to(torch.bfloat16)), ("i64", torch.arange(7)),
             ("scalar", torch.tensor(2.5)), ("empty", torch.zeros(0, 3)), ("mask", torch.tensor([True, False, True])),
             ("view", base[1:3, 2:5]), ("f16", torch.randn(2, 2, dtype=torch.float16))]
    path, manifest = wt.write_shm(named)
    try:
        for payload in (encode_bytes(named), manifest):
            got = wt.deserialize_named_tensors(payload)
            assert [n for n, _ in got] == [n for n, _ in named]
            for (_, a), (_, b) in zip(got, named):
                assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    finally:
        wt.unlink_shm(path)
    assert len(base64.b64decode(encode_bytes([("view", base[1:3, 2:5])]))) < base.nbytes + 400  # not all of base


class _Reduces:
    """Pickles to fn(*args): how a crafted payload would call something on the server."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _b64pickle(obj) -> str:
    return base64.b64encode(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)).decode("ascii")


def test_malformed_tensor_payloads_get_a_one_line_error_and_change_nothing(server, reference, tmp_path):
    """Network input: a pickle naming anything beyond torch's tensor rebuilds is refused before it runs,
    a by-value view past its storage, a CUDA handle on a CPU server and a shm manifest naming another file
    are refused, each with one line; the served weights stay."""
    import collections

    from torch.multiprocessing import reductions

    state = perturbed(reference, seed=4)
    push_tensors(server, state, 7, bucket_bytes=1 << 30, timeout_s=60, transport="shm")
    expected, before = expected_logprobs(reference, state), server_version(server)
    name, weight = next(iter(state.items()))
    marker = tmp_path / "ran"
    storage = torch.zeros(4)._typed_storage()
    fake_cuda = (torch.Tensor, torch.Size([2]), (1,), 0, torch.storage.TypedStorage, torch.float32, 0, b"h" * 64,
                 8, 0, False, b"r" * 8, 0, b"e" * 64, True)
    hex_name = uuid.uuid4().hex
    link = os.path.join(wt.SHM_DIR, f"kbench-weights-{hex_name}")
    os.symlink("/etc/hostname", link)
    manifest = {"kbench_shm": 1, "path": link, "size": 64, "tensors": [[name, "float32", list(weight.shape), 0]]}
    cases = [
        (_b64pickle([(name, _Reduces(os.system, f"touch {marker}"))]), "is not allowed in a weight payload"),
        (_b64pickle(_Reduces(eval, "1+1")), "builtins.eval is not allowed"),
        ("%% not base64 %%", "neither base64"),
        (_b64pickle([(name, weight)])[:200], "not a pickle"),
        (_b64pickle({name: weight}), "non-empty list of (name, tensor) pairs"),
        (_b64pickle([(name, _Reduces(torch._utils._rebuild_tensor_v2, storage, 0, (100,), (1,), False,
                                     collections.OrderedDict()))]), "reaches element 100 of a 4-element storage"),
        (_b64pickle([(name, _Reduces(reductions.rebuild_cuda_tensor, *fake_cuda))]),
         "need a server on a GPU" if not torch.cuda.is_available() else "not a pickle"),
        ('{"kbench_shm": 1, "path": ', "not a valid kbench shm manifest"),
        (json.dumps({**manifest, "path": "/etc/passwd"}), "only /dev/shm/kbench-weights-<32 hex> files"),
        (json.dumps({**manifest, "path": "/dev/shm/../etc/kbench-weights-" + hex_name}), "files are read"),
        (json.dumps(manifest), "cannot open"),  # a symlink is not followed
        (json.dumps({**manifest, "path": f"{wt.SHM_DIR}/kbench-weights-{'0' * 32}"}), "cannot open"),  # missing
    ]
    try:
        for payload, why in cases:
            reply = tensor_post(server, payload)
            message = reply.json()["error"]["message"]
            assert reply.status_code == 400 and reply.json()["success"] is False, (why, reply.text)
            assert why in message and "\n" not in message, (why, message)
        real_path, real = wt.write_shm([(name, weight)])
        try:
            spec = json.loads(real)
            shape = list(weight.shape)
            for bad, why in [({"tensors": [[name, "float32", shape, 4 + spec["size"]]]}, "do not fit"),
                             ({"tensors": [[name, "float99", shape, 0]]}, "unknown dtype"),
                             ({"tensors": [[name, "float32", [-1], 0]]}, "want [name, dtype, shape, offset]"),
                             ({"size": 0}, "size > 0")]:
                message = tensor_post(server, json.dumps({**spec, **bad})).json()["error"]["message"]
                assert why in message and "\n" not in message, (why, message)
        finally:
            wt.unlink_shm(real_path)
        one = encode_bytes([(name, weight)])
        for body, why in [({"serialized_named_tensors": ["a", "b"]}, "one string"),
                          ({"serialized_named_tensors": [one], "load_format": "flattened_bucket"}, "not supported")]:
            reply = requests.post(f"{server}/update_weights_from_tensor", json=body, timeout=30).json()
            assert why in reply["error"]["message"]
    finally:
        os.unlink(link)
    assert not marker.exists()  # os.system never ran
    assert server_version(server) == before
    assert_serves(server, expected)


class _Health(threading.Thread):
    """A stand-in server whose GET /health answers `body` (None: SGLang's empty 200)."""

    def __init__(self, body):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        super().__init__(target=self.httpd.serve_forever, daemon=True)
        self.start()


def test_transport_is_picked_per_server(server):
    """kbench serve on this host: shm (cuda_ipc only if it offers it and rank 0 has a GPU); another host's
    kbench serve: bytes; a server with SGLang's bare /health: cuda_ipc for a GPU trainer on its node,
    else bytes."""
    import ray

    here, node = wt.host_id(), ray.util.get_node_ip_address()
    cpu, gpu = (StagedPlan(None, 1, [], "", cuda=c, host_id=here, node_ip=node) for c in (False, True))
    assert pick_transport(server, cpu) == "shm"
    assert pick_transport(server, gpu) == "shm"  # a CPU server offers no cuda_ipc
    assert pick_transport(server, StagedPlan(None, 1, [], "", host_id="other-host", node_ip=node)) == "bytes"
    gpu_server = _Health({"weight_transports": ["cuda_ipc", "shm", "bytes"], "host_id": here})
    sglang = _Health(None)
    try:
        assert pick_transport(gpu_server.url, gpu) == "cuda_ipc"
        assert pick_transport(gpu_server.url, cpu) == "shm"
        assert pick_transport(sglang.url, gpu) == "cuda_ipc"
        elsewhere = StagedPlan(None, 1, [], "", cuda=True, host_id=here, node_ip="10.9.9.9")
        assert pick_transport(sglang.url, elsewhere) == "bytes"
        assert pick_transport(sglang.url, cpu) == "bytes"  # a CPU trainer has no IPC handles to give
    finally:
        gpu_server.httpd.shutdown()
        sglang.httpd.shutdown()


@pytest.mark.gpu
def test_cuda_ipc_payloads_load_what_bytes_load(tiny_model, reference):
    """GPU only: a bf16 state dict on this process's GPU reaches `kbench serve --device cuda` as CUDA IPC
    handles, and serves as the same weights sent by value; the sender's GPU buckets are freed."""
    state = {k: v.to(torch.bfloat16) for k, v in perturbed(reference, seed=31).items()}
    other = {k: v.to(torch.bfloat16) for k, v in perturbed(reference, seed=32).items()}
    with kbench_server(tiny_model, device="cuda", visible_gpus=os.environ.get("CUDA_VISIBLE_DEVICES", "0")) as gpu:
        health = requests.get(f"{gpu.url}/health", timeout=10).json()
        assert health["weight_transports"][0] == "cuda_ipc" and health["host_id"] == wt.host_id()
        torch.cuda.init()
        allocated = torch.cuda.memory_allocated()
        push_tensors(gpu.url, state, 1, bucket_bytes=64 << 10, timeout_s=60, transport="cuda_ipc")  # from CPU
        torch.cuda.ipc_collect()
        assert torch.cuda.memory_allocated() == allocated
        via_ipc = served_logprobs(gpu.url)
        push_tensors(gpu.url, other, 2, bucket_bytes=1 << 30, timeout_s=60, transport="bytes")
        assert max(abs(a - b) for a, b in zip(served_logprobs(gpu.url), via_ipc)) > 1e-3
        push_tensors(gpu.url, state, 3, bucket_bytes=1 << 30, timeout_s=60, transport="bytes")
        assert max(abs(a - b) for a, b in zip(served_logprobs(gpu.url), via_ipc)) < 1e-5


def test_the_cuda_ipc_encoder_refuses_cpu_tensors_with_one_line():
    """Runs the encoder's imports on any machine (an import that only a GPU run reached failed on the H100)."""
    from kbencheval.llm.weight_transfer import encode_cuda_ipc

    with pytest.raises(ValueError, match="CUDA tensors only"):
        encode_cuda_ipc([("w", torch.zeros(2))])
