#!/usr/bin/env bash
# Set up TritonForge on a fresh machine (CPU-only works):  bash scripts/setup.sh
# Creates .venv, installs torch first (a plain `torch` requirement would pull GBs of CUDA wheels),
# then the package with pinned versions. On a GPU image, set TF_SYSTEM_TORCH=1 to keep its torch.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  cat <<'USAGE'
usage: bash scripts/setup.sh            creates .venv with torch, triton and this package (pinned by constraints.txt)
environment:
  TF_SYSTEM_TORCH: flag = unset   set (to anything) to keep the image's CUDA/ROCm torch (--system-site-packages)
example:
  TF_SYSTEM_TORCH=1 bash scripts/setup.sh
USAGE
  exit 0
fi
cd "$(dirname "$0")/.."
python3 -m venv ${TF_SYSTEM_TORCH:+--system-site-packages} .venv
pip=".venv/bin/python -m pip"
$pip install -q --upgrade pip
if [ -z "${TF_SYSTEM_TORCH:-}" ]; then
  $pip install -q "torch==$(sed -n 's/^torch==//p' constraints.txt)"
fi
# Every extra (pyproject.toml's `all`), so CI runs every test: llm + train (smart: Ray, TensorBoard,
# transformers), wandb, data (faiss-cpu + sentence-transformers for RA-ICL; their torch requirement is
# met by the torch above), megatron (megatron-core + mbridge, no Transformer Engine: the CPU conversion
# tests), sglang (sglang-router, so the router tests run against the real router in front of `kbench serve`).
# The evaluator alone is `pip install tritonforge` (tests/e2e/test_installs.py checks that in a fresh venv).
$pip install -q -c constraints.txt -e ".[dev,all]"
# The candidate sandbox is built from kernel features (kbencheval/eval/processes/sandbox, no package needed);
# bubblewrap, where installed, adds an outer read-only-filesystem, no-network layer around it.
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) \
    || echo "note: bubblewrap not installed; the kernel sandbox runs without the bubblewrap layer"
fi
.venv/bin/python -c "import torch, triton, kbencheval, smart; print('tritonforge ready: torch', torch.__version__, 'triton', triton.__version__)"
