# Sourced by run_sft.sh and run_rl.sh: interpreter choice, environment, and on-demand base models.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
build_model() {  # runs/tiny-model (CPU tests) and runs/small-model (GPU smoke runs) are built on demand
  case "$1" in
    runs/tiny-model) "$PY" scripts/make_tiny_model.py --out runs/tiny-model ;;
    runs/small-model) "$PY" scripts/make_tiny_model.py --out runs/small-model --hidden 512 --layers 8 ;;
    *) return 1 ;;
  esac
}
