# Sourced by run_sft.sh and run_rl.sh: interpreter choice, environment, and on-demand base models.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then  # run directly (e.g. with --help): say what it is
  echo "scripts/_launcher_common.sh is sourced by run_sft.sh and run_rl.sh (PYTHON=interpreter, default .venv/bin/python);"
  echo "example: bash scripts/run_rl.sh --help"
  exit 0
fi
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
