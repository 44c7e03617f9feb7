#!/usr/bin/env bash
# bash scripts/run_rl.sh configs/rl_tiny_cpu.yaml [key=value ...]
# DRIVER=async bash scripts/run_rl.sh configs/rl_tiny_cpu.yaml train.grpo.tis_clip=2   (smart rl-async: overlapped)
# GRPO through `smart rl`. The shipped configs start from the SFT run's export (runs/sft_*/hf); when
# that is missing the launcher says so and starts from the matching base model, building it if needed.
# Relative paths are read and written from the current directory.
source "$(dirname "$0")/_launcher_common.sh"
case "${DRIVER:-sync}" in sync) CMD=rl ;; async) CMD=rl-async ;; *) echo "run_rl.sh: DRIVER=$DRIVER; use sync or async" >&2; exit 2 ;; esac
[[ "${1:-}" == -h || "${1:-}" == --help ]] && exec "$PY" -m smart.cli "$CMD" --help  # every key, default and type
[[ $# -ge 1 ]] || { echo "usage: bash scripts/run_rl.sh CONFIG.yaml [key=value ...]" >&2; exit 2; }
require_config "$1"
# a typo fails here, before a model is built; a finished run says so and nothing starts
FINISHED=$("$PY" -m smart.cli "$CMD" "$@" --check)
[[ -z "$FINISHED" ]] || { echo "$FINISHED"; exit 0; }
EXTRA=()
MODEL=$(config_value "$1" model_path "${@:2}")
if [[ "$MODEL" == runs/sft_* && ! -f "$MODEL/config.json" ]]; then
  BASE=runs/tiny-model; [[ "$MODEL" == runs/sft_small* ]] && BASE=runs/small-model
  echo "run_rl.sh: $MODEL not found (run scripts/run_sft.sh first to start from SFT); starting from $BASE" >&2
  [[ -f "$BASE/config.json" ]] || build_model "$BASE"
  EXTRA=(model_path=$BASE)
fi
exec "$PY" -m smart.cli "$CMD" "$@" "${EXTRA[@]}"
