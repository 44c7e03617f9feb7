#!/usr/bin/env bash
# bash scripts/run_sft.sh configs/sft_tiny_cpu.yaml [key=value ...]
# SFT through `smart sft`. A missing runs/tiny-model or runs/small-model is built first.
source "$(dirname "$0")/_launcher_common.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && exec "$PY" -m smart.cli sft --help  # every key, default and type
[[ $# -ge 1 ]] || { echo "usage: bash scripts/run_sft.sh CONFIG.yaml [key=value ...]" >&2; exit 2; }
MODEL=$(sed -n 's/^model_path: *//p' "$1")
if ! printf '%s\n' "${@:2}" | grep -q "^model_path=" && [[ ! -f "$MODEL/config.json" ]]; then
  build_model "$MODEL" || true
fi
exec "$PY" -m smart.cli sft "$@"
