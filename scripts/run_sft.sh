#!/usr/bin/env bash
# bash scripts/run_sft.sh configs/sft_tiny_cpu.yaml [key=value ...]
# SFT through `smart sft`. A missing runs/tiny-model or runs/small-model is built first.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bash scripts/run_sft.sh CONFIG.yaml [key=value ...]" >&2; exit 2; }
PY=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
build_model() {  # runs/tiny-model (CPU tests) and runs/small-model (GPU smoke runs) are built on demand
  case "$1" in
    runs/tiny-model) "$PY" scripts/make_tiny_model.py --out runs/tiny-model ;;
    runs/small-model) "$PY" scripts/make_tiny_model.py --out runs/small-model --hidden 512 --layers 8 ;;
    *) return 1 ;;
  esac
}
MODEL=$(sed -n 's/^model_path: *//p' "$1")
if ! printf '%s\n' "${@:2}" | grep -q "^model_path=" && [[ ! -f "$MODEL/config.json" ]]; then
  build_model "$MODEL" || true
fi
exec "$PY" -m smart.cli sft "$@"
