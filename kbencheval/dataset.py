"""KernelBench-format problems and their loaders: bundled suite, local folder, Hugging Face dataset.

A problem module defines `Model(nn.Module)`, module-level size constants, `get_inputs()` and
`get_init_inputs()`. TritonForge reads four optional module-level literals on top of that
(plain KernelBench files simply lack them):

    SMALL_SIZES = {"batch_size": 2, "dim": 64}   # constants for a seconds-long interpreter run
    TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}      # overrides the per-dtype default
    ALLOWED_TORCH_OPS = ["aten.convolution"]      # torch ops a candidate's forward may call
    INPUT_DOMAIN = "positive"                      # inputs the problem is defined on: any (default), positive,
                                                   # unit_scale, or none (no stress trials); see eval/inputs.py
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import re
from pathlib import Path

# Which stress trials (scaled/shifted inputs) a problem admits; kbencheval/eval/contract/inputs.py maps them.
# unit_scale: a softmax over matmul logits is ill-conditioned at large inputs. TF32 matmul rounding grows
# with the logits' scale, so an honest TF32 kernel can fail the x100 trial (L2_12, L3_2).
INPUT_DOMAINS = ("any", "positive", "unit_scale", "none")

BUNDLED_ROOT = Path(__file__).parent / "problems"
HF_DATASET = "ScalingIntelligence/KernelBench"
_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")


class ProblemError(ValueError):
    """A problem file or id that cannot be used; the message says what to change."""


@dataclasses.dataclass
class Problem:
    level: int
    problem_id: int
    name: str
    source: str
    path: str = ""  # "" for problems that came from a dataset row
    small_sizes: dict = dataclasses.field(default_factory=dict)
    tolerance: dict = dataclasses.field(default_factory=dict)
    allowed_torch_ops: list = dataclasses.field(default_factory=list)
    input_domain: str = "any"  # which stress trials (scaled/shifted inputs) the evaluator may run
    solution_source: str | None = None  # reference Triton solution, bundled suite only

    @property
    def key(self) -> str:
        """Stable id used in run folders: `L1_19_ReLU`."""
        return f"L{self.level}_{self.problem_id}_{self.name}"

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


def parse_problem(source: str, *, level: int = 0, problem_id: int = 0, name: str = "", path: str = "") -> Problem:
    """Validate a KernelBench problem statically (no code runs) and read its TritonForge literals."""
    where = path or name or "problem"
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ProblemError(f"problem {where} is not valid Python (line {e.lineno}: {e.msg})") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [x for x in ("Model", "get_inputs", "get_init_inputs") if x not in defined]
    if missing:
        raise ProblemError(
            f"problem {where} has no {', '.join(missing)}: KernelBench problems define "
            "class Model(nn.Module), get_inputs() and get_init_inputs()"
        )
    literals = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target in ("SMALL_SIZES", "TOLERANCE", "ALLOWED_TORCH_OPS", "INPUT_DOMAIN"):
                try:
                    literals[target] = ast.literal_eval(node.value)
                except ValueError:
                    raise ProblemError(f"problem {where}: {target} must be a literal") from None
    domain = literals.get("INPUT_DOMAIN", "any")
    if domain not in INPUT_DOMAINS:
        raise ProblemError(f"problem {where}: INPUT_DOMAIN is {domain!r}; use one of {', '.join(INPUT_DOMAINS)}")
    return Problem(
        level=level,
        problem_id=problem_id,
        name=name,
        source=source,
        path=path,
        small_sizes=literals.get("SMALL_SIZES", {}),
        tolerance=literals.get("TOLERANCE", {}),
        allowed_torch_ops=list(literals.get("ALLOWED_TORCH_OPS", [])),
        input_domain=domain,
    )


def load_problem_file(path: str | Path, *, level: int = 0) -> Problem:
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"problem file {path} does not exist; pass a KernelBench problem .py file")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(f"cannot read problem file {path}: {e}") from None
    m = _FILE_RE.match(path.name)
    problem_id, name = (int(m.group(1)), m.group(2)) if m else (0, path.stem)
    if not level:
        lm = re.match(r"level(\d+)$", path.parent.name)
        level = int(lm.group(1)) if lm else 0
    return parse_problem(source, level=level, problem_id=problem_id, name=name, path=str(path))


def load_local(root: str | Path, level: int, *, with_solutions: bool = False) -> list[Problem]:
    """All problems of `root/level{level}/` (KernelBench's layout), sorted by id."""
    folder = Path(root) / f"level{level}"
    if not folder.is_dir():
        raise ProblemError(f"{folder} does not exist; a KernelBench folder has level1/, level2/, ... inside")
    problems = []
    for path in sorted(folder.glob("*.py"), key=lambda p: _sort_key(p.name)):
        if not _FILE_RE.match(path.name):
            continue
        problem = load_problem_file(path, level=level)
        if with_solutions:
            sol = Path(root) / "solutions" / f"level{level}" / path.name
            problem.solution_source = sol.read_text() if sol.is_file() else None
        problems.append(problem)
    return problems


def _sort_key(filename: str) -> tuple[int, str]:
    m = _FILE_RE.match(filename)
    return (int(m.group(1)), filename) if m else (1 << 30, filename)


def load_bundled(level: int) -> list[Problem]:
    return load_local(BUNDLED_ROOT, level, with_solutions=True)


def load_huggingface(level: int, path: str = HF_DATASET) -> list[Problem]:
    """KernelBench rows (`code`, `level`, `name`, `problem_id`) from the hub or a local copy of it."""
    import datasets  # heavy; only this loader needs it

    try:
        rows = datasets.load_dataset(path, split=f"level_{level}")
    except Exception as e:  # datasets raises many types; the user needs one line
        raise ProblemError(f"cannot load split level_{level} of dataset {path}: {str(e).splitlines()[0]}") from None
    problems = []
    for row in rows:
        name = row["name"]
        m = _FILE_RE.match(name)
        name = m.group(2) if m else name.removesuffix(".py")
        problems.append(
            parse_problem(row["code"], level=int(row["level"]), problem_id=int(row["problem_id"]), name=name)
        )
    return sorted(problems, key=lambda p: p.problem_id)


def load_problems(source: str = "bundled", level: int = 1, *, path: str | None = None) -> list[Problem]:
    """`source` is bundled | local | huggingface; `path` is the local folder or dataset id."""
    if source == "bundled":
        return load_bundled(level)
    if source == "local":
        if not path:
            raise ProblemError("dataset_src=local needs a folder: set dataset_path=/path/to/KernelBench")
        return load_local(path, level)
    if source == "huggingface":
        return load_huggingface(level, path or HF_DATASET)
    raise ProblemError(f"unknown dataset source '{source}': use bundled, local or huggingface")


def get_problem(source: str, level: int, problem_id: int, *, path: str | None = None) -> Problem:
    for problem in load_problems(source, level, path=path):
        if problem.problem_id == problem_id:
            return problem
    raise ProblemError(f"no problem {problem_id} in level {level} of {source}{f' ({path})' if path else ''}")
