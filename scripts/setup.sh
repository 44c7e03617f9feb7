#!/usr/bin/env bash
# Set up TritonForge on a fresh machine (CPU-only works):  bash scripts/setup.sh
# Creates .venv, installs torch first (a plain `torch` requirement would pull GBs of CUDA wheels),
# then the package with pinned versions. On a GPU image, set TF_SYSTEM_TORCH=1 to keep its torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv ${TF_SYSTEM_TORCH:+--system-site-packages} .venv
pip=".venv/bin/python -m pip"
$pip install -q --upgrade pip
if [ -z "${TF_SYSTEM_TORCH:-}" ]; then
  $pip install -q "torch==$(sed -n 's/^torch==//p' constraints.txt)"
fi
$pip install -q -c constraints.txt -e ".[dev]"
# bubblewrap adds a no-network, read-only-filesystem sandbox around candidates; optional.
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) \
    || echo "note: bubblewrap not installed; candidates run without the filesystem/network sandbox"
fi
.venv/bin/python -c "import torch, triton, kbencheval, smart; print('tritonforge ready: torch', torch.__version__, 'triton', triton.__version__)"
