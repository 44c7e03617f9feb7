"""Installs by role: the core `pip install tritonforge` is the evaluator and its CLIs; the rest are extras.

The fast tests check pyproject.toml against the code's imports; the slow one installs the core alone
into a fresh venv (torch first, as scripts/setup.sh does) and runs `kbench check` on a bundled problem.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions

import pytest

from kbencheval.extras import EXTRA_OF
from tests.support import ENV, REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# The evaluator's commands: the core install must run them.
CORE_COMMANDS = ["check", "serve-eval", "run-one", "generate", "eval", "report", "synth"]


def _dist(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _third_party_imports() -> dict[str, str]:
    """top-level module -> one file importing it, over kbencheval and smart (bundled problems aside)."""
    found = {}
    for f in sorted([*(REPO / "kbencheval").rglob("*.py"), *(REPO / "smart").rglob("*.py")]):
        if "problems" in f.relative_to(REPO).parts:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in (n.split(".")[0] for n in names):
                if top not in sys.stdlib_module_names and top not in ("kbencheval", "smart"):
                    found.setdefault(top, str(f.relative_to(REPO)))
    return found


def test_every_imported_package_is_declared():
    core = {_dist(r) for r in PYPROJECT["dependencies"]}
    extras = {name: {_dist(r) for r in reqs} for name, reqs in PYPROJECT["optional-dependencies"].items()}
    dists = packages_distributions()
    for module, where in _third_party_imports().items():
        dist = _dist(dists.get(module, [module])[0])
        if dist in core:
            continue
        extra = EXTRA_OF.get(module)
        assert extra is not None, f"{where} imports {module} ({dist}): declare it in pyproject.toml and kbencheval/extras.py"
        assert dist in extras[extra], f"{where} imports {module}: add {dist} to the '{extra}' extra in pyproject.toml"


def test_extras_map_matches_pyproject():
    extras = {name: {_dist(r) for r in reqs} for name, reqs in PYPROJECT["optional-dependencies"].items()}
    dists = packages_distributions()
    for module, extra in EXTRA_OF.items():
        dist = _dist(dists.get(module, [module])[0])
        assert dist in extras[extra], f"kbencheval/extras.py maps {module} to '{extra}', which lacks {dist}"
    # the images and scripts/setup.sh install `all`: it must hold every extra but dev
    everything = {e for r in PYPROJECT["optional-dependencies"]["all"] for e in re.findall(r"\w+", r.split("[", 1)[1])}
    assert everything == set(extras) - {"dev", "all"}


# A finder that plays "not installed" for every extra, in this process and its children (sitecustomize).
_BLOCKER = """
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Absent())
"""


def test_core_cli_modules_import_without_extras(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(_BLOCKER.format(blocked=set(EXTRA_OF)))
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    code = ("import importlib, kbencheval.cli as c\n"
            f"for name in {CORE_COMMANDS!r}: importlib.import_module(c.SUBCOMMANDS[name][0])\n"
            "import ray")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "No module named 'ray'" in r.stderr.splitlines()[-1], r.stderr  # the blocker works, and only bites at the end
    r = subprocess.run([sys.executable, "-m", "kbencheval.cli", "serve", "--model", "m"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        'kbench serve: this needs transformers, which the core install leaves out: pip install "tritonforge[llm]"']


@pytest.mark.slow  # a fresh venv with torch and the core install: ~70 s
def test_core_install_alone_runs_kbench_check(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    for pkg in ("kbencheval", "smart"):
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    torch_pin = re.search(r"^torch==(\S+)", (REPO / "constraints.txt").read_text(), re.M).group(1)
    subprocess.run([py, "-m", "pip", "install", "-q", f"torch=={torch_pin}"], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "-c", REPO / "constraints.txt", str(src)], check=True)
    # no PYTHONPATH and a neutral cwd: the installed copy runs, not this checkout
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, env=env).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert not installed & {"ray", "transformers", "datasets", "tensorboard", "wandb", "faiss-cpu"}, installed

    def kbench(*args):
        return subprocess.run([venv / "bin" / "kbench", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    for name in CORE_COMMANDS:
        r = kbench(name, "--help")
        assert r.returncode == 0 and "example" in r.stdout, (name, r.stderr)
    site = subprocess.run([py, "-c", "import kbencheval, os; print(os.path.dirname(kbencheval.__file__))"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert site.startswith(str(venv))
    kernel = f"{site}/problems/solutions/level1/1_ReLU.py"
    r = kbench("check", "--level", "1", "--problem-id", "1", "--kernel", kernel, "--device", "cpu", "--json", "trials=1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "correct"
    r = subprocess.run([venv / "bin" / "smart", "sft", "configs/sft.yaml"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and 'pip install "tritonforge[train]"' in r.stderr, r.stderr
