# Sourced by run_sft.sh, run_rl.sh and run_learning.sh: interpreter, environment, config checks, base models.
# Relative paths (the config, out_dir, RUN_DIR, runs/...) are the caller's, as for `kbench`: nothing cds.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then  # run directly (e.g. with --help): say what it is
  echo "scripts/_launcher_common.sh is sourced by run_sft.sh, run_rl.sh and run_learning.sh (PYTHON=interpreter, default .venv/bin/python);"
  echo "example: bash scripts/run_rl.sh --help"
  exit 0
fi
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python3)}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
# make_tiny_model.py's save draws a progress bar per shard (transformers reads this at import)
export HF_HUB_DISABLE_PROGRESS_BARS=${HF_HUB_DISABLE_PROGRESS_BARS:-1}
# Ray's default for a new local cluster (token auth), chosen, so it does not warn that it picked it
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}
LAUNCHER=$(basename "$0")

require_config() {  # require_config PATH: one line naming the path when it is not a file
  [[ -f "$1" ]] || { echo "$LAUNCHER: no config file $1 (relative paths are read from $PWD)" >&2; exit 2; }
}
config_value() {  # config_value PATH KEY [key=value ...]: KEY's value, the last override of it winning
  local path=$1 key=$2 value; shift 2
  value=$(sed -n "s/^$key: *//p" "$path" | sed 's/ *#.*//')
  for arg in "$@"; do [[ "$arg" == "$key="* ]] && value=${arg#"$key="}; done
  echo "$value"
}
build_model() {  # runs/tiny-model (CPU tests) and runs/small-model (GPU smoke runs) are built on demand
  case "$1" in
    runs/tiny-model) "$PY" "$ROOT/scripts/make_tiny_model.py" --out runs/tiny-model ;;
    runs/small-model) "$PY" "$ROOT/scripts/make_tiny_model.py" --out runs/small-model --hidden 512 --layers 8 ;;
    *) return 1 ;;
  esac
}
