"""`kbench eval` and smart's reward pool on a Ray cluster of two nodes (a head and a worker node, each
its own raylet and object store, started here with Ray's own cluster_utils), judging real candidates
with real Evaluators on both nodes.

What a second machine would lack is not assumed: the problems and the code travel to the actors as
data, every verdict comes back to the driver, which alone writes the run's files. Each verdict names
the node that judged it (checks["node"]), so the test sees both nodes at work.
pytest -m slow tests/e2e/test_ray_two_nodes.py"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from kbencheval.bench.store import read_results  # noqa: E402
from kbencheval.dataset import load_problems  # noqa: E402
from kbencheval.eval import EvalConfig, Status  # noqa: E402
from smart.config import RewardConfig  # noqa: E402
from smart.reward.pool import reward_pool  # noqa: E402
from tests.data.test_kernelbench_interop import write_kernelbench_run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes():
    """One CPU on each node, so two one-CPU actors cannot share a node."""
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head_node": 1}, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"second_node": 1})
    cluster.wait_for_nodes()
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def node_ids(address: str) -> set[str]:
    ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    return {n["NodeID"][:12] for n in ray.nodes() if n["Alive"]}


def test_kbench_eval_spreads_a_run_over_both_nodes(two_nodes, tmp_path):
    runs = tmp_path / "ours"
    kb_run = write_kernelbench_run(tmp_path / "KernelBench" / "runs")
    kbench = [sys.executable, "-m", "kbencheval.cli"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    subprocess.run([*kbench, "kernelbench", "import", str(kb_run), f"runs_dir={runs}", "dataset_src=bundled",
                    "evaluate=false"], check=True, env=env, timeout=120)
    done = subprocess.run([*kbench, "eval", "run_name=kb_tiny_rejudged", f"runs_dir={runs}", "placement=ray",
                           f"ray_address={two_nodes.address}", "device=cpu", "cpu_evaluators=2", "eval.trials=1"],
                          env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = read_results(runs / "kb_tiny_rejudged" / "results.jsonl")[0].values()
    assert sorted(r["status"] for r in records) == ["correct", "incorrect"]
    assert {r["checks"]["node"] for r in records} == node_ids(two_nodes.address)  # one actor on each node


class OnNode:
    """A placement slot pinned to one node, as a placement-group bundle pins a GPU worker."""

    def __init__(self, node_id: str):
        self.node_id = node_id

    def options(self) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {"num_cpus": 1, "scheduling_strategy": NodeAffinitySchedulingStrategy(self.node_id, soft=False)}


def test_the_reward_pool_judges_on_both_nodes(two_nodes):
    node_ids(two_nodes.address)
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    [problem] = [p for p in load_problems("bundled", 1) if p.problem_id == 1]
    right = f"```python\n{problem.solution_source}\n```"
    wrong = right.replace("tl.maximum", "tl.minimum")
    pool = reward_pool(RewardConfig(eval_actors=2, eval=EvalConfig(device="cpu", trials=1, timeout_s=120)),
                       slots=[OnNode(n) for n in nodes])
    try:
        results = pool.evaluate([(problem, right), (problem, wrong), (problem, right)], backend="triton")
    finally:
        pool.close()
    assert [r.status for r in results] == [Status.CORRECT, Status.INCORRECT, Status.CORRECT]
    assert {r.checks["node"] for r in results[:2]} == {n[:12] for n in nodes}  # two candidates, two nodes
    assert pool.deduplicated == 1
