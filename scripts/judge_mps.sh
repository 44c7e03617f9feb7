#!/usr/bin/env bash
# The judges' MPS server: one CUDA context for every Evaluator's judge on this node, so their work runs
# side by side instead of taking turns on the device (docs/evaluator.md, "Judges under MPS").
# Candidates' workers never join it: a fatal fault in one MPS client ends every client of its server.
set -euo pipefail
usage() {
  cat <<'USAGE'
usage: scripts/judge_mps.sh start|stop|status [PIPE_DIR]
  start   start an MPS control daemon whose pipe folder is PIPE_DIR (default: $XDG_RUNTIME_DIR or
          /var/tmp, then kbench-judge-mps-$USER) and print the line that points the evaluator at it
  stop    stop that daemon (its server exits with it)
  status  say whether a daemon answers there
example:
  eval "$(scripts/judge_mps.sh start)"   # exports KBENCH_JUDGE_MPS_PIPE
  kbench eval level=1 eval.device=cuda workers_per_gpu=8
  scripts/judge_mps.sh stop
USAGE
}
case "${1:-}" in
  -h|--help|help) usage; exit 0 ;;
  start|stop|status) ;;
  *) usage >&2; exit 2 ;;
esac
pipe=${2:-${KBENCH_JUDGE_MPS_PIPE:-${XDG_RUNTIME_DIR:-/var/tmp}/kbench-judge-mps-${USER:-$(id -u)}}}
control() { CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$pipe/log" nvidia-cuda-mps-control "$@"; }
command -v nvidia-cuda-mps-control >/dev/null || { echo "nvidia-cuda-mps-control not found: MPS needs NVIDIA's driver tools on PATH" >&2; exit 1; }
case "$1" in
  start)
    mkdir -p "$pipe/log" && chmod 700 "$pipe"
    [[ -S "$pipe/control" ]] || control -d
    echo "export KBENCH_JUDGE_MPS_PIPE=$pipe" ;;
  stop)
    [[ -S "$pipe/control" ]] && echo quit | control
    echo "stopped the judges' MPS daemon at $pipe" >&2 ;;
  status)
    if [[ -S "$pipe/control" ]] && echo get_server_list | control >/dev/null; then
      echo "an MPS daemon answers at $pipe"
    else
      echo "no MPS daemon at $pipe" >&2; exit 1
    fi ;;
esac
