"""Decontamination: does a program overlap a benchmark problem? Normalised AST hash + token n-grams.

    ref = reference_problems(["bundled", "local:/data/KernelBench", "huggingface"])
    checker = Decontaminator(ref, ngram_n=8, threshold=0.5)
    match = checker.check(record.pytorch_source)     # None, or Match(problem_key, method, score)

Normalisation makes renaming useless: docstrings and comments go, every local name (variables,
arguments, functions, classes) becomes V0, V1, ... in order of first use, numbers become NUM and
strings STR; attribute names (torch.relu, nn.Linear) and imported module names stay, since they say
what the program computes. Two checks, either one drops the record:
- `ast`: the normalised programs are identical (a renamed or reformatted copy).
- `ngram`: Jaccard similarity of the sets of n-token windows of the normalised programs (imports
  left out, and windows found in more than 5% of the references ignored as boilerplate) is at
  least `threshold`.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import hashlib
import io
import tokenize
from collections import Counter

from kbencheval.corpus.records import CorpusError

_BUILTINS = set(dir(builtins)) | {"self", "super"}
BOILERPLATE_SHARE = 0.05  # an n-gram in more than this share of the references is boilerplate


class _Normalise(ast.NodeTransformer):
    def __init__(self, keep: set[str]):
        self.keep, self.names = keep, {}

    def _rename(self, name: str) -> str:
        if name in self.keep or name in _BUILTINS or name.startswith("__"):
            return name
        return self.names.setdefault(name, f"V{len(self.names)}")

    def visit_Name(self, node):
        node.id = self._rename(node.id)
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = self._rename(node.arg), None
        return node

    def visit_FunctionDef(self, node):
        node.name, node.returns = self._rename(node.name), None
        node.body = _drop_docstring(node.body)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node.name = self._rename(node.name)
        node.body = _drop_docstring(node.body)
        self.generic_visit(node)
        return node

    def visit_JoinedStr(self, node):
        return ast.Name(id="STR", ctx=ast.Load())

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or node.value is None:
            return node
        return ast.Name(id="STR" if isinstance(node.value, (str, bytes)) else "NUM", ctx=ast.Load())


def _drop_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:] or [ast.Pass()]
    return body


def normalise(source: str) -> str:
    """The program with names, literals, docstrings, comments and imports normalised away."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise CorpusError(f"cannot normalise a program that is not valid Python (line {e.lineno}: {e.msg})") from None
    keep = set()
    body = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            body.append(node)
    tree.body = _drop_docstring(body)
    return ast.unparse(ast.fix_missing_locations(_Normalise(keep).visit(tree)))


def ast_hash(source: str) -> str:
    return hashlib.sha256(normalise(source).encode()).hexdigest()[:16]


def ngrams(source: str, n: int) -> set[tuple[str, ...]]:
    text = normalise(source)
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT}
    tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip]
    if len(tokens) < n:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)}


@dataclasses.dataclass
class Match:
    problem_key: str
    method: str  # ast | ngram
    score: float


class Decontaminator:
    """Checks programs against a fixed set of benchmark problems (their sources, and solutions if any)."""

    def __init__(self, references: list[tuple[str, str]], *, ngram_n: int = 8, threshold: float = 0.5):
        if ngram_n < 2 or not 0 < threshold <= 1:
            raise CorpusError(f"decontamination needs ngram_n >= 2 and 0 < threshold <= 1, got {ngram_n}, {threshold}")
        self.ngram_n, self.threshold = ngram_n, threshold
        self.by_hash: dict[str, list[str]] = {}
        grams: list[tuple[str, set]] = []
        for key, source in references:
            try:
                self.by_hash.setdefault(ast_hash(source), []).append(key)
                grams.append((key, ngrams(source, ngram_n)))
            except CorpusError:
                continue  # a reference that does not parse cannot be matched against anyway
        # Windows shared by many references are boilerplate (class Model(nn.Module), get_inputs, ...):
        # they would make every two small programs look alike, so they do not count.
        df = Counter(g for _, gs in grams for g in gs)
        self.common = {g for g, n in df.items() if n > max(2, BOILERPLATE_SHARE * len(grams))}
        self.grams = [(key, gs - self.common) for key, gs in grams]

    def matches(self, source: str) -> list[Match]:
        """Every reference the program overlaps, best first (a program that does not parse matches none)."""
        try:
            digest, grams = ast_hash(source), ngrams(source, self.ngram_n)
        except CorpusError:
            return []
        found = {key: Match(key, "ast", 1.0) for key in self.by_hash.get(digest, [])}
        grams -= self.common
        for key, ref in self.grams:
            if key in found or not grams or not ref:
                continue
            score = len(grams & ref) / len(grams | ref)
            if score >= self.threshold:
                found[key] = Match(key, "ngram", round(score, 4))
        return sorted(found.values(), key=lambda m: -m.score)

    def check(self, source: str) -> Match | None:
        """The best match, or None when the program is clean."""
        found = self.matches(source)
        return found[0] if found else None


def reference_problems(specs: list[str]) -> list[tuple[str, str]]:
    """(key, source) of every problem (and bundled solution) in the named problem sets.

    A spec is `bundled`, `local:/path/to/KernelBench` or `huggingface[:dataset_id]`; levels found are all read.
    """
    from kbencheval.dataset import HF_DATASET, ProblemError, load_bundled, load_huggingface, load_local

    refs: list[tuple[str, str]] = []
    for spec in specs:
        kind, _, arg = spec.partition(":")
        loaded = []
        for level in (1, 2, 3, 4):
            try:
                if kind == "bundled":
                    loaded += [(f"bundled:{p.key}", p) for p in load_bundled(level)]
                elif kind == "local":
                    if not arg:
                        raise CorpusError("decontam spec 'local' needs a folder: local:/path/to/KernelBench")
                    loaded += [(f"local:{p.key}", p) for p in load_local(arg, level)]
                elif kind == "huggingface":
                    loaded += [(f"hf:{p.key}", p) for p in load_huggingface(level, arg or HF_DATASET)]
                else:
                    raise CorpusError(f"unknown decontam set '{spec}': use bundled, local:/path or huggingface[:id]")
            except ProblemError:
                continue  # this level is absent from the set
        if not loaded:
            raise CorpusError(f"decontam set '{spec}' has no problems (no level1/..level4 found or loadable)")
        for key, p in loaded:
            refs.append((key, p.source))
            if p.solution_source:
                refs.append((f"{key}:solution", p.solution_source))
    return refs
