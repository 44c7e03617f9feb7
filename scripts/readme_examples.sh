#!/usr/bin/env bash
# bash scripts/readme_examples.sh [--list]
# Runs the README's "Train" examples that run on a CPU (those naming a configs/*_cpu.yaml), as written and
# in order, in a fresh copy of the tracked tree (so no earlier runs/ is resumed), stopping at the first
# that fails; CI runs it after the fast tier, so the README cannot drift from the launchers. The Quick
# start is CI's own first steps (.ci/run runs it verbatim). Skipped: run_learning.sh (a whole learning
# pipeline; its stages are the launchers run here). --list prints the commands without running them.
# example: bash scripts/readme_examples.sh --list
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0
fi
# the ```bash block of the "## Train" section, one command a line, comments dropped; CPU configs only
mapfile -t COMMANDS < <(awk '/^## /{train = ($0 == "## Train")} train && /^```bash/{on = 1; next}
  on && /^```/{on = 0} on' "$ROOT/README.md" | sed 's/  *#.*//' | grep '_cpu\.yaml' | grep -v 'run_learning\.sh')
[[ ${#COMMANDS[@]} -gt 0 ]] || { echo "readme_examples.sh: no CPU command found in README.md's Train section" >&2; exit 1; }
if [[ "${1:-}" == --list ]]; then printf '%s\n' "${COMMANDS[@]}"; exit 0; fi

WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 tar -c) | tar -x -C "$WORK"
ln -s "$ROOT/.venv" "$WORK/.venv"
cd "$WORK"
# shellcheck disable=SC1091  # the README's commands assume the activated venv
source .venv/bin/activate
for cmd in "${COMMANDS[@]}"; do
  echo "== $cmd" >&2
  t0=$(date +%s)
  bash -c "$cmd" || { echo "readme_examples.sh: README command failed: $cmd" >&2; exit 1; }
  echo "== $(( $(date +%s) - t0 )) s" >&2
done
echo "readme_examples.sh: ${#COMMANDS[@]} README commands ran as written"
