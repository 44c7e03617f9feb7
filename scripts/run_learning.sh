#!/usr/bin/env bash
# bash scripts/run_learning.sh configs/learn_synth_cpu.yaml [RUN_DIR] [key=value ...]
# The whole learning pipeline of issue 13, one stage after another (a rerun skips finished stages):
#   1. kbench synth: train/held-out problems (+ verification), SFT conversations   RUN/synth/
#   2. tokenizer (trained on the synthetic problems) + random Qwen3-shaped model     RUN/base/
#   3. smart sft on the train split only                                               RUN/sft/
#   4. held-out eval of the SFT model: kbench generate / eval / report                 RUN/evals/heldout_sft*
#   5. GRPO through scripts/run_rl.sh, starting from the SFT model                     RUN/rl/
#   6. held-out eval of the RL model, same sampling settings and seeds                 RUN/evals/heldout_rl*
#   7. curves (scripts/plot_learning.py)                                               RUN/plots/
# Seconds per stage go to RUN/stage_seconds.txt. Overrides are dotted: seed=1 sft.num_steps=10 eval.num_samples=4.
# example: PYTHON=.venv/bin/python bash scripts/run_learning.sh configs/learn_synth_cpu.yaml runs/learn_cpu
source "$(dirname "$0")/_launcher_common.sh"
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
[[ $# -ge 1 ]] || { echo "usage: bash scripts/run_learning.sh CONFIG.yaml [RUN_DIR] [key=value ...]" >&2; exit 2; }
CONFIG=$1; shift
RUN=runs/$(basename "$CONFIG" .yaml)
if [[ $# -ge 1 && "$1" != *=* ]]; then RUN=$1; shift; fi
mkdir -p "$RUN"
SETTINGS=$("$PY" scripts/learning_config.py "$CONFIG" "$RUN" "$@")
eval "$SETTINGS"

timed() {  # timed NAME CMD...: run a stage and record its wall seconds
  local name=$1 t0; shift
  t0=$(date +%s)
  echo "== $(date -u +%H:%M:%S) $name" >&2
  "$@"
  echo "$name $(( $(date +%s) - t0 ))" >> "$RUN/stage_seconds.txt"
}

heldout_subset() {  # the first N held-out problem ids, as kbench's subset=[...]
  "$PY" - "$RUN/synth/manifest.json" "$LEARN_EVAL_NUM_PROBLEMS" <<'EOF'
import json, sys
manifest = json.load(open(sys.argv[1]))
ids = sorted(int(p["file"].split("_")[0]) for p in manifest["problems"] if p["split"] == "heldout")
if not ids:
    sys.exit("run_learning.sh: the synth run kept no held-out problem; raise synth.n")
print("[" + ",".join(map(str, ids[: int(sys.argv[2])])) + "]")
EOF
}

evaluate() {  # evaluate NAME MODEL: held-out generations, verdicts and report of one checkpoint
  local name=heldout_$1 model=$2 subset
  subset=$(heldout_subset)
  timed "generate_$1" "$PY" -m kbencheval.cli generate run_name="$name" runs_dir="$RUN/evals" dataset_src=local \
    dataset_path="$RUN/synth/heldout" level=1 subset="$subset" num_samples="$LEARN_EVAL_NUM_SAMPLES" \
    server_type=embedded model_name="$model" temperature="$LEARN_EVAL_TEMPERATURE" top_p="$LEARN_EVAL_TOP_P" \
    max_tokens="$LEARN_EVAL_MAX_TOKENS" seed="$LEARN_SEED" prompt_style="$LEARN_PROMPT_STYLE" \
    batch_size="${LEARN_EVAL_BATCH_SIZE:-0}"
  local trials=(); [[ -n "${LEARN_EVAL_TRIALS:-}" ]] && trials=(eval.trials="$LEARN_EVAL_TRIALS")
  timed "eval_$1" "$PY" -m kbencheval.cli eval run_name="$name" runs_dir="$RUN/evals" device="$LEARN_EVAL_DEVICE" \
    num_gpus="${LEARN_EVAL_NUM_GPUS:-0}" cpu_workers="${LEARN_EVAL_CPU_WORKERS:-1}" \
    workers_per_gpu="${LEARN_EVAL_WORKERS_PER_GPU:-1}" "${trials[@]}"
  "$PY" -m kbencheval.cli report "$name" runs_dir="$RUN/evals" --json > "$RUN/evals/$name.json"
}

# shellcheck disable=SC2086  # LEARN_SYNTH_ARGS is a list of flags
[[ -f "$RUN/synth/manifest.json" ]] || timed synth "$PY" -m kbencheval.cli synth --out "$RUN/synth" \
  --seed "$LEARN_SEED" $LEARN_SYNTH_ARGS
[[ -f "$RUN/base/config.json" ]] || timed model "$PY" scripts/make_tiny_model.py --out "$RUN/base" \
  --vocab-size "$LEARN_MODEL_VOCAB_SIZE" --hidden "$LEARN_MODEL_HIDDEN" --layers "$LEARN_MODEL_LAYERS" \
  --seed "$LEARN_SEED" --corpus "$RUN/synth/train"
[[ -f "$RUN/sft/hf/config.json" ]] || timed sft "$PY" -m smart.cli sft "$RUN/config/sft.yaml"
[[ -f "$RUN/evals/heldout_sft.json" ]] || evaluate sft "$RUN/sft/hf"
[[ -f "$RUN/rl/hf/config.json" ]] || timed rl bash scripts/run_rl.sh "$RUN/config/rl.yaml"
[[ -f "$RUN/evals/heldout_rl.json" ]] || evaluate rl "$RUN/rl/hf"
"$PY" scripts/plot_learning.py "$RUN" --out "$RUN/plots"
echo "run_learning.sh: done; held-out reports in $RUN/evals/, curves in $RUN/plots/" >&2
