#!/usr/bin/env bash
# bash scripts/run_sft.sh configs/sft_tiny_cpu.yaml [key=value ...]
# SFT through `smart sft`. A missing runs/tiny-model or runs/small-model is built first (after the
# config and overrides are checked). Relative paths are read and written from the current directory.
source "$(dirname "$0")/_launcher_common.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && exec "$PY" -m smart.cli sft --help  # every key, default and type
[[ $# -ge 1 ]] || { echo "usage: bash scripts/run_sft.sh CONFIG.yaml [key=value ...]" >&2; exit 2; }
require_config "$1"
# a typo fails here, before a model is built; a finished run says so and nothing starts
FINISHED=$("$PY" -m smart.cli sft "$@" --check)
[[ -z "$FINISHED" ]] || { echo "$FINISHED"; exit 0; }
MODEL=$(config_value "$1" model_path "${@:2}")
[[ -f "$MODEL/config.json" ]] || build_model "$MODEL" || true
exec "$PY" -m smart.cli sft "$@"
