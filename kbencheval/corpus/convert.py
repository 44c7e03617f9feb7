"""A corpus record -> a KernelBench `Problem` and a candidate answer in KernelBench's `ModelNew` form.

KernelBook: the PyTorch side is a module `<Name>` with get_inputs() and get_init_inputs(), where
get_init_inputs() returns `[args, kwargs]` (KernelBench returns positional args only). The Triton
side defines `<Name>New` (Inductor output reshaped by the KernelBook authors). We append a small
adapter to each side rather than editing the code:

    class Model(<Name>):                       # problem side
        def __init__(self, init_args, init_kwargs):
            super().__init__(*init_args, **init_kwargs)

    class ModelNew(<Name>New):                 # candidate side, same constructor
        def __init__(self, init_args, init_kwargs):
            super().__init__(*init_args, **init_kwargs)

so the harness's `Model(*get_init_inputs())` builds both from the row's own arguments. A row whose
get_init_inputs() does not return that `[list, dict]` shape gets plain subclasses
(`class Model(<Name>): pass`), KernelBench's positional convention.

Sakana: PyTorch_Code_Module is already a KernelBench problem. Its CUDA code binds `forward` for the
functional program (PyTorch_Code_Functional, whose Model.forward takes `fn=module_fn`). The candidate
is that functional program with its Model renamed, the CUDA code built with load_inline, and
`ModelNew.forward(*args)` calling the functional forward with `fn=<extension>.forward`.
"""

from __future__ import annotations

import ast

from kbencheval.corpus.inductor import normalise_inductor
from kbencheval.corpus.records import CorpusError, CorpusRecord
from kbencheval.dataset import Problem, ProblemError, parse_problem

ADAPTER_HEADER = "# KernelBench interface, added by kbencheval.corpus (see kbencheval/corpus/convert.py)"


def _class_names(source: str, where: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise CorpusError(f"{where} is not valid Python (line {e.lineno}: {e.msg})") from None
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef)]


def _init_returns_args_and_kwargs(source: str) -> bool:
    """Does get_init_inputs() return KernelBook's `[[args...], {kwargs...}]` (statically, from its return)?"""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
            returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
            return bool(returns) and all(
                isinstance(r, (ast.List, ast.Tuple)) and len(r.elts) == 2
                and (isinstance(r.elts[1], ast.Dict) or (isinstance(r.elts[1], ast.Call)
                                                         and getattr(r.elts[1].func, "id", "") == "dict"))
                for r in returns)
    return False


def _adapter(name: str, base: str, split_kwargs: bool) -> str:
    if not split_kwargs:
        return f"{ADAPTER_HEADER}\nclass {name}({base}):\n    pass\n"
    return (f"{ADAPTER_HEADER}\nclass {name}({base}):\n"
            "    def __init__(self, init_args, init_kwargs):\n"
            "        super().__init__(*init_args, **init_kwargs)\n")


def _kernelbook_problem_source(record: CorpusRecord) -> str:
    names = _class_names(record.pytorch_source, f"{record.id} python_code")
    entry = record.entry_point if record.entry_point in names else ""
    if not entry:
        raise CorpusError(f"{record.id}: python_code defines no class '{record.entry_point}' (its entry_point); "
                          f"classes found: {names[:5]}")
    split = _init_returns_args_and_kwargs(record.pytorch_source)
    return f"{record.pytorch_source.rstrip()}\n\n\n{_adapter('Model', entry, split)}"


def _kernelbook_candidate(record: CorpusRecord) -> str:
    names = _class_names(record.kernel_source, f"{record.id} triton_code")
    wanted = f"{record.entry_point}New"
    new_cls = wanted if wanted in names else next((n for n in reversed(names) if n.endswith("New")), "")
    if not new_cls:
        raise CorpusError(f"{record.id}: triton_code defines no '{wanted}' class (nor any *New class) to call ModelNew")
    split = _init_returns_args_and_kwargs(record.pytorch_source)  # the problem's constructor decides
    kernel = normalise_inductor(record.kernel_source)  # Inductor's internal helpers -> public APIs
    return f"{kernel.rstrip()}\n\n\n{_adapter('ModelNew', new_cls, split)}"


class _RenameModel(ast.NodeTransformer):
    def visit_ClassDef(self, node):
        if node.name == "Model":
            node.name = "FunctionalModel"
        self.generic_visit(node)
        return node

    def visit_Name(self, node):
        if node.id == "Model":
            node.id = "FunctionalModel"
        return node


def _sakana_candidate(record: CorpusRecord) -> str:
    if not record.functional_source.strip():
        raise CorpusError(f"{record.id}: no PyTorch_Code_Functional, so the CUDA code's forward has no caller")
    try:
        tree = _RenameModel().visit(ast.parse(record.functional_source))
    except SyntaxError as e:
        raise CorpusError(f"{record.id}: PyTorch_Code_Functional is not valid Python (line {e.lineno})") from None
    if "FunctionalModel" not in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}:
        raise CorpusError(f"{record.id}: PyTorch_Code_Functional defines no class Model")
    ext_name = "sakana_" + record.source_hash
    return (f"{ast.unparse(tree)}\n\n\n{ADAPTER_HEADER}\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"cuda_source = {record.kernel_source!r}\n\n"
            f"ext = load_inline(name={ext_name!r}, cpp_sources='', cuda_sources=cuda_source)\n\n\n"
            "class ModelNew(FunctionalModel):\n"
            "    def forward(self, *args):\n"
            "        return super().forward(*args, fn=ext.forward)\n")


def to_problem(record: CorpusRecord) -> Problem:
    """The record's PyTorch program as a KernelBench problem (named after the record, level 0)."""
    source = _kernelbook_problem_source(record) if record.backend == "triton" else record.pytorch_source
    name = record.id.replace(":", "_").replace("/", "_")
    try:
        return parse_problem(source, level=0, problem_id=0, name=name)
    except ProblemError as e:
        raise CorpusError(f"{record.id}: {e}") from None


def to_candidate_code(record: CorpusRecord) -> str:
    """The record's kernel as code defining ModelNew."""
    return _kernelbook_candidate(record) if record.backend == "triton" else _sakana_candidate(record)


def to_answer(record: CorpusRecord) -> str:
    """The assistant turn: the candidate in one python fence, as the prompts ask and the evaluator reads."""
    return f"```python\n{to_candidate_code(record).strip()}\n```"
