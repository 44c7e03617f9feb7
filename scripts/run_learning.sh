#!/usr/bin/env bash
# bash scripts/run_learning.sh configs/learn_synth_cpu.yaml [RUN_DIR] [key=value ...]
# The whole learning pipeline, one stage after another, in RUN_DIR (default runs/CONFIG_NAME; a rerun skips finished stages):
#   1. kbench synth: train / test / held-out problems (+ verification), SFT conversations   RUN/synth/
#      (test: new problems from the train distribution; held-out: operator pairs train never saw)
#   2. tokenizer (trained on the synthetic problems) + random Qwen3-shaped model     RUN/base/
#   3. smart sft on the train split only; with sft_stop, in chunks of sft_stop.every steps, each followed
#      by a probe (pass@k, correctness only, on eval.split problems the evaluations below do not use),
#      stopping at the first chunk that reaches sft_stop.min_pass_at_k                        RUN/sft/
#   4. evaluation of the SFT model on eval.split (sampled; greedy too with eval.greedy), and on the
#      held-out split beside a test one (eval.heldout_problems): kbench generate / eval / report
#                                                                          RUN/evals/{test,heldout}_sft*
#   5. GRPO through scripts/run_rl.sh, starting from the SFT model (its prompts: with rl_pool: N, N train problems
#      SFT never saw, set apart after stage 1 by scripts/learning_rl_pool.py)            RUN/rl/
#   6. the same evaluations of the RL model, same problems, sampling settings and seeds   RUN/evals/*_rl*
#   7. controls (when set): SFT continued for as many optimizer steps as GRPO took     RUN/sft_continued/
#      and GRPO with rewards shuffled within each batch                                RUN/rl_shuffled/
#      each evaluated on eval.split (sampled)                        RUN/evals/*_{sft_continued,rl_shuffled}.json
#   7b. ablations (when set): GRPO again from the SFT model with one setting changed    RUN/rl_NAME/
#      evaluated like the controls                                               RUN/evals/*_rl_NAME.json
#   With eval.multi_turn: T, the SFT and RL models also get a T-turn evaluation with the evaluator's feedback
#      (Kevin mode) on the same problems                                           RUN/evals/multiturn_{sft,rl}.json
#   With lanes: N > 1, shuffled-reward GRPO and the ablations run beside GRPO, continued SFT and their evaluations,
#   in N - 1 side lanes (ablations dealt out in turn), each lane on a GPU of its own when there are N.
#   8. curves (scripts/plot_learning.py) and paired comparisons (scripts/learning_compare.py)  RUN/plots/
# Seconds per stage go to RUN/stage_seconds.txt. Overrides are dotted: seed=1 sft.num_steps=10 eval.num_samples=4.
# Relative paths (CONFIG, RUN_DIR) are read and written from the current directory.
# example: PYTHON=.venv/bin/python bash scripts/run_learning.sh configs/learn_synth_cpu.yaml runs/learn_cpu
source "$(dirname "$0")/_launcher_common.sh"
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0; fi
[[ $# -ge 1 ]] || { echo "usage: bash scripts/run_learning.sh CONFIG.yaml [RUN_DIR] [key=value ...]" >&2; exit 2; }
CONFIG=$1; shift
require_config "$CONFIG"
RUN=runs/$(basename "$CONFIG" .yaml)
if [[ $# -ge 1 && "$1" != *=* ]]; then RUN=$1; shift; fi
mkdir -p "$RUN"
SETTINGS=$("$PY" "$ROOT/scripts/learning_config.py" "$CONFIG" "$RUN" "$@")
eval "$SETTINGS"

timed() {  # timed NAME CMD...: run a stage and record its wall seconds
  local name=$1 t0; shift
  t0=$(date +%s)
  echo "== $(date -u +%H:%M:%S) $name" >&2
  "$@"
  echo "$name $(( $(date +%s) - t0 ))" >> "$RUN/stage_seconds.txt"
}

split_subset() {  # split_subset SPLIT OFFSET COUNT: problem ids [OFFSET, OFFSET+COUNT) of a split, as kbench's subset=[...]
  "$PY" - "$RUN/synth/manifest.json" "$1" "$2" "$3" <<'EOF'
import json, sys
manifest, split = json.load(open(sys.argv[1])), sys.argv[2]
ids = sorted(int(p["file"].split("_")[0]) for p in manifest["problems"] if p["split"] == split)
offset, count = int(sys.argv[3]), int(sys.argv[4])
if len(ids) <= offset:
    sys.exit(f"run_learning.sh: {len(ids)} {split} problems, none after the first {offset}; raise synth.n (or "
             "synth.test_fraction) or lower eval.num_problems (the SFT probe uses the problems after the evaluation's)")
print("[" + ",".join(map(str, ids[offset:offset + count])) + "]")
EOF
}

evaluate() {  # evaluate NAME MODEL SPLIT OFFSET COUNT SAMPLES TEMPERATURE [kbench eval key=value ...]: RUN/evals/NAME.json
  local name=$1 model=$2 split=$3 subset samples=$6 temperature=$7
  subset=$(split_subset "$split" "$4" "$5")
  shift 7
  timed "generate_$name" "$PY" -m kbencheval.cli generate run_name="$name" runs_dir="$RUN/evals" dataset_src=local \
    dataset_path="$RUN/synth/$split" level=1 subset="$subset" num_samples="$samples" \
    server_type=embedded model_name="$model" temperature="$temperature" top_p="$LEARN_EVAL_TOP_P" \
    max_tokens="$LEARN_EVAL_MAX_TOKENS" seed="$LEARN_SEED" prompt_style="$LEARN_PROMPT_STYLE" \
    batch_size="${LEARN_EVAL_BATCH_SIZE:-0}" engine_dtype="${LEARN_EVAL_ENGINE_DTYPE:-auto}"
  local extra=()
  [[ -n "${LEARN_EVAL_TRIALS:-}" ]] && extra+=(eval.trials="$LEARN_EVAL_TRIALS")
  [[ "${LEARN_EVAL_TIMING:-true}" == false ]] && extra+=(eval.timing=false)
  # dedupe: a model this small writes the same kernel in many of its samples; each distinct one is judged once
  timed "eval_$name" "$PY" -m kbencheval.cli eval run_name="$name" runs_dir="$RUN/evals" device="$LEARN_EVAL_DEVICE" dedupe=true \
    num_gpus="${LEARN_EVAL_NUM_GPUS:-0}" cpu_evaluators="${LEARN_EVAL_CPU_EVALUATORS:-1}" \
    evaluators_per_gpu="${LEARN_EVAL_EVALUATORS_PER_GPU:-1}" "${extra[@]}" "$@"
  # written whole or not at all: a finished report is what a rerun and the status poll look for
  "$PY" -m kbencheval.cli report "$name" runs_dir="$RUN/evals" --json > "$RUN/evals/$name.json.part"
  mv "$RUN/evals/$name.json.part" "$RUN/evals/$name.json"
}

SPLIT=${LEARN_EVAL_SPLIT:-heldout}
evaluate_checkpoint() {  # evaluate_checkpoint TAG MODEL [primary|training]: the before/after evaluations, identical for
  # every checkpoint; controls and ablations take only the primary one (eval.split, sampled), which their comparisons
  # use; GRPO's exports (training) take it and greedy, so both criteria on the primary split can be read over training.
  # A checkpoint's evaluations run side by side: each is mostly start-up and waiting, on the GPU and on the CPU cores.
  local tag=$1 model=$2 scope=${3:-all} jobs=() job
  if [[ ! -f "$RUN/evals/${SPLIT}_$tag.json" ]]; then
    evaluate "${SPLIT}_$tag" "$model" "$SPLIT" 0 "$LEARN_EVAL_NUM_PROBLEMS" "$LEARN_EVAL_NUM_SAMPLES" \
      "$LEARN_EVAL_TEMPERATURE" & jobs+=($!)
  fi
  if [[ "$scope" != primary && "${LEARN_EVAL_GREEDY:-false}" == true && ! -f "$RUN/evals/${SPLIT}_${tag}_greedy.json" ]]; then
    evaluate "${SPLIT}_${tag}_greedy" "$model" "$SPLIT" 0 "$LEARN_EVAL_NUM_PROBLEMS" 1 0 & jobs+=($!)
  fi
  # the unseen-operator-pair split beside an in-distribution primary
  if [[ "$scope" == all && "$SPLIT" != heldout && "${LEARN_EVAL_HELDOUT_PROBLEMS:-0}" -gt 0 && \
        ! -f "$RUN/evals/heldout_$tag.json" ]]; then
    evaluate "heldout_$tag" "$model" heldout 0 "$LEARN_EVAL_HELDOUT_PROBLEMS" "${LEARN_EVAL_HELDOUT_SAMPLES:-4}" \
      "$LEARN_EVAL_TEMPERATURE" & jobs+=($!)
  fi
  for job in "${jobs[@]}"; do
    wait "$job" || { echo "run_learning.sh: an evaluation of $tag failed (its error is above); rerun to resume" >&2; exit 1; }
  done
}

split_keys() {  # split_keys SPLIT OFFSET COUNT: the problem keys of split_subset's problems, as smart's data.problems=["..."]
  "$PY" - "$RUN/synth/manifest.json" "$1" "$2" "$3" <<'EOF'
import json, sys
manifest, split = json.load(open(sys.argv[1])), sys.argv[2]
rows = sorted((int(p["file"].split("_")[0]), p["key"]) for p in manifest["problems"] if p["split"] == split)
offset, count = int(sys.argv[3]), int(sys.argv[4])
print(json.dumps([key for _, key in rows[offset:offset + count]]))
EOF
}

evaluate_multiturn() {  # evaluate_multiturn TAG MODEL: eval.multi_turn turns with the evaluator's feedback (Kevin mode) on
  # the evaluations' problems, through smart rl without a trainer; per-turn numbers in RUN/evals/multiturn_TAG.json
  local tag=$1 model=$2 keys
  [[ "${LEARN_EVAL_MULTI_TURN:-0}" -gt 0 && ! -f "$RUN/evals/multiturn_$tag.json" ]] || return 0
  keys=$(split_keys "$SPLIT" 0 "$LEARN_EVAL_NUM_PROBLEMS")
  timed "multiturn_$tag" bash "$ROOT/scripts/run_rl.sh" "$RUN/config/rl.yaml" mode=rollout_only model_path="$model" \
    out_dir="$RUN/multiturn_$tag" num_steps=1 max_minutes=0 save_every=0 export_hf=false data.path="$RUN/synth/$SPLIT" \
    data.problems="$keys" rollout.prompts_per_step="$(tr -cd , <<< "$keys" | wc -c | awk '{print $1 + 1}')" \
    rollout.n_samples_per_prompt="${LEARN_EVAL_MULTI_TURN_SAMPLES:-4}" rollout.max_turns="$LEARN_EVAL_MULTI_TURN" \
    rollout.filter_fn= rollout.refill_max_rounds=0 rollout.temperature="$LEARN_EVAL_TEMPERATURE"
  "$PY" "$ROOT/scripts/learning_multiturn.py" "$RUN/multiturn_$tag/rollouts/step_00000.jsonl" \
    --manifest "$RUN/synth/manifest.json" --out "$RUN/evals/multiturn_$tag.json.part" > /dev/null
  mv "$RUN/evals/multiturn_$tag.json.part" "$RUN/evals/multiturn_$tag.json"
}

pass_at_k() {  # pass_at_k REPORT.json K: the unbiased pass@K over the report's problems
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
from kbencheval.bench.metrics import pass_at_k
problems, k = json.load(open(sys.argv[1]))["problems"], int(sys.argv[2])
print(f"{sum(pass_at_k(p['n'], p['correct'], k) for p in problems) / max(len(problems), 1):.4f}")
EOF
}

sft_until_stop() {  # SFT, in chunks with a held-out probe after each when sft_stop is set; RUN/sft/stopped_at = its last step
  local step=0 pass
  if [[ -z "${LEARN_SFT_STOP_EVERY:-}" ]]; then
    timed sft "$PY" -m smart.cli sft "$RUN/config/sft.yaml"
    echo "$LEARN_SFT_NUM_STEPS" > "$RUN/sft/stopped_at"
    return
  fi
  while :; do
    step=$(( step + LEARN_SFT_STOP_EVERY > LEARN_SFT_NUM_STEPS ? LEARN_SFT_NUM_STEPS : step + LEARN_SFT_STOP_EVERY ))
    timed "sft_to_$step" "$PY" -m smart.cli sft "$RUN/config/sft.yaml" num_steps="$step"  # resumes the last chunk
    # correctness only: the probe decides when to stop; the evaluations below measure speed too
    evaluate "${SPLIT}_sft_probe_$step" "$RUN/sft/hf" "$SPLIT" "$LEARN_EVAL_NUM_PROBLEMS" "$LEARN_SFT_STOP_NUM_PROBLEMS" \
      "$LEARN_SFT_STOP_NUM_SAMPLES" "$LEARN_EVAL_TEMPERATURE" eval.timing=false
    pass=$(pass_at_k "$RUN/evals/${SPLIT}_sft_probe_$step.json" "$LEARN_SFT_STOP_NUM_SAMPLES")
    echo "$step $pass" >> "$RUN/sft/probes.txt"
    echo "== SFT step $step: $SPLIT probe pass@$LEARN_SFT_STOP_NUM_SAMPLES = $pass" >&2
    if (( step >= LEARN_SFT_NUM_STEPS )) || \
       "$PY" -c "import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))" "$pass" "$LEARN_SFT_STOP_MIN_PASS_AT_K"; then
      break
    fi
  done
  echo "$step" > "$RUN/sft/stopped_at"
}

sft_continued() {  # the control: SFT resumed where it stopped, for as many optimizer steps as GRPO took
  local stopped rl_steps end
  stopped=$(cat "$RUN/sft/stopped_at")
  rl_steps=$("$PY" -c 'import glob, json, sys
print(max(json.load(open(f))["next_step"] for f in glob.glob(sys.argv[1] + "/checkpoints/step_*/run_state.json")))' "$RUN/rl")
  end=$(( stopped + rl_steps * LEARN_RL_STEPS_PER_ROLLOUT ))
  mkdir -p "$RUN/sft_continued/checkpoints"
  cp -r "$RUN/sft/checkpoints/step_$(printf %06d "$stopped")" "$RUN/sft_continued/checkpoints/"
  # a decaying schedule is stretched to the new end (at the old one its lr would be the floor)
  "$PY" -m smart.cli sft "$RUN/config/sft.yaml" out_dir="$RUN/sft_continued" num_steps="$end" train.lr_decay_steps="$end"
}

# shellcheck disable=SC2086  # LEARN_SYNTH_ARGS is a list of flags
[[ -f "$RUN/synth/manifest.json" ]] || timed synth "$PY" -m kbencheval.cli synth --out "$RUN/synth" \
  --seed "$LEARN_SEED" $LEARN_SYNTH_ARGS
if (( ${LEARN_RL_POOL:-0} > 0 )); then  # train problems SFT never sees, for GRPO (remade: under a second)
  "$PY" "$ROOT/scripts/learning_rl_pool.py" "$RUN" "$LEARN_RL_POOL"
fi
[[ -f "$RUN/base/config.json" ]] || timed model "$PY" "$ROOT/scripts/make_tiny_model.py" --out "$RUN/base" \
  --vocab-size "$LEARN_MODEL_VOCAB_SIZE" --hidden "$LEARN_MODEL_HIDDEN" --layers "$LEARN_MODEL_LAYERS" \
  --seed "$LEARN_SEED" --corpus "$RUN/synth/train"
[[ -f "$RUN/sft/stopped_at" ]] || sft_until_stop
evaluate_checkpoint sft "$RUN/sft/hf"
rl_start() {  # rl_start ARM: with train.optimizer_from: sft, the override that starts ARM's Adam where SFT left it
  [[ " ${LEARN_RL_OPTIMIZER_FROM_SFT:-} " == *" $1 "* ]] || return 0
  echo "train.optimizer_from=$RUN/sft/checkpoints/step_$(printf %06d "$(cat "$RUN/sft/stopped_at")")"
}
main_lane() {  # GRPO, its evaluations, the continued-SFT control (it needs GRPO's step count), then multi-turn
  # (the comparisons the success criteria name come first: a hold that runs out loses the least)
  local start; start=$(rl_start rl)
  [[ -f "$RUN/rl/hf/config.json" ]] || timed rl bash "$ROOT/scripts/run_rl.sh" "$RUN/config/rl.yaml" ${start:+"$start"}
  evaluate_checkpoint rl "$RUN/rl/hf"
  if [[ "${LEARN_CONTROLS_SFT_CONTINUED:-false}" == true ]]; then
    [[ -f "$RUN/sft_continued/hf/config.json" ]] || timed sft_continued sft_continued
    evaluate_checkpoint sft_continued "$RUN/sft_continued/hf" primary
  fi
  evaluate_multiturn rl "$RUN/rl/hf"
}

evaluate_over_training() {  # GRPO's policy during training (rl.export_hf_every): the exports made so far, each on the
  # primary split, sampled and greedy; beside a main lane still in GRPO, the later ones are missed
  local export steps
  for export in "$RUN"/rl/hf_steps/step_*; do
    [[ "$export" != *.tmp && -f "$export/config.json" ]] || continue
    steps=$((10#${export##*_}))
    evaluate_checkpoint "rl_step$steps" "$export" training
  done
}

side_lane() {  # side_lane INDEX: beside the main lane, side lane INDEX (from 1). The first runs the SFT model's
  # multi-turn evaluation and shuffled-reward GRPO; each runs its share of the ablations (GRPO from the SFT model,
  # one setting changed), which learning_config.py deals out in turn
  local index=$1 start arm arms_of_lane=LEARN_LANE_ARMS_$1
  if (( index == 1 )); then
    evaluate_multiturn sft "$RUN/sft/hf"
    if [[ "${LEARN_CONTROLS_SHUFFLED_REWARDS:-false}" == true ]]; then
      start=$(rl_start rl)
      [[ -f "$RUN/rl_shuffled/hf/config.json" ]] || timed rl_shuffled bash "$ROOT/scripts/run_rl.sh" "$RUN/config/rl.yaml" \
        out_dir="$RUN/rl_shuffled" reward.reward_fn=smart.reward.controls:shuffled_preset_rewards ${start:+"$start"}
      evaluate_checkpoint rl_shuffled "$RUN/rl_shuffled/hf" primary
    fi
    evaluate_over_training
  fi
  for arm in ${!arms_of_lane:-}; do
    start=$(rl_start "$arm")
    [[ -f "$RUN/$arm/hf/config.json" ]] || timed "$arm" bash "$ROOT/scripts/run_rl.sh" "$RUN/config/$arm.yaml" ${start:+"$start"}
    evaluate_checkpoint "$arm" "$RUN/$arm/hf" primary
  done
}

lane_device() {  # lane_device INDEX: the GPU lane INDEX gets when there are two or more (CUDA_VISIBLE_DEVICES
  # entries if set; lanes share them in turn when there are fewer GPUs than lanes)
  local visible
  visible=${CUDA_VISIBLE_DEVICES:-$("$PY" -c 'import torch; print(",".join(map(str, range(torch.cuda.device_count()))))')}
  IFS=, read -r -a visible <<< "$visible"
  (( ${#visible[@]} >= 2 )) && echo "${visible[$(( $1 % ${#visible[@]} ))]}"
  return 0
}

LANES=${LEARN_LANES:-1}
if (( LANES > 1 )); then
  # the main lane and LANES - 1 side lanes side by side, each on a GPU of its own when there are enough
  pids=()
  for (( lane = 0; lane < LANES; lane++ )); do
    gpu=$(lane_device "$lane")
    if (( lane == 0 )); then
      ( [[ -n "$gpu" ]] && export CUDA_VISIBLE_DEVICES=$gpu; main_lane ) & pids+=($!)
    else
      ( [[ -n "$gpu" ]] && export CUDA_VISIBLE_DEVICES=$gpu; side_lane "$lane" ) & pids+=($!)
    fi
  done
  failed=()
  for lane in "${!pids[@]}"; do
    wait "${pids[$lane]}" || failed+=("$( (( lane == 0 )) && echo main || echo "side $lane")")
  done
  if (( ${#failed[@]} )); then
    echo "run_learning.sh: the ${failed[*]} lane(s) failed (the errors are above); rerun to resume" >&2
    exit 1
  fi
else
  main_lane
  side_lane 1
fi
"$PY" "$ROOT/scripts/plot_learning.py" "$RUN" --out "$RUN/plots"
"$PY" "$ROOT/scripts/learning_compare.py" "$RUN" --out "$RUN/plots/compare.json"
echo "run_learning.sh done: $(cd "$RUN" && pwd) (reports in evals/, curves and comparisons in plots/, seconds per stage in stage_seconds.txt)"
