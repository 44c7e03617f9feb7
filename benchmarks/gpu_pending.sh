#!/usr/bin/env bash
# Every GPU measurement the issues still ask for, as named steps, each bounded by its own time limit,
# so a device session spends its minutes on the steps it picks (most important first):
#   bash benchmarks/gpu_pending.sh OUT_DIR STEP [STEP ...]
#   bash benchmarks/gpu_pending.sh "$OUT" suite_events check_latency   # on the device, one call
# Steps (seconds are the step's limit; a step's figures land in OUT_DIR/work/<step>.*):
#   gpu_tests       evaluator: sandbox attacks + tests/evaluator/test_gpu_{harness,device_kernels}.py   (580)
#   suite_trusted   all 40 bundled solutions, trusted timing, 2 passes: reproducibility, overhead       (560)
#   suite_events    the same, KernelBench-style eager timing, 1 pass: trusted vs eager speedups          (300)
#   suite_4w        4 Evaluators on the GPU (device gate), 2 passes: candidates/min, reproducibility    (560)
#   suite_8w        the same with 8 Evaluators                                                           (560)
#   suite_8w_no_launchers  the same without the harness's launcher builds (KBENCH_LAUNCHER_CACHE=0)       (560)
#   check_latency   kbench check cold vs served by kbench serve-eval                                      (240)
#   engine          embedded engine tokens/s vs transformers generate, with the bandwidth floor           (500)
#   megatron        tests/smart/test_megatron_gpu.py and train_throughput.py --quick                            (560)
#   megatron_driver tests/smart/test_megatron_gpu.py -k driver, stacks dumped after 150 s, Ray logs packed    (280)
#   megatron_rl     one GRPO step from scripts/run_rl.sh with backend megatron, tiny random Qwen3      (280)
#   megatron_throughput train_throughput.py on both Qwen3 shapes, both backends, 16 x 1024 tokens    (500)
#   throughput_profile  train_throughput.py --profile at the 1.7B shape: Megatron, torch, torch with foreach Adam,
#                   torch with compiled layers,
#                   torch with 16k-token micro-batches; GPU ms per kernel category and host gap per pass       (500)
#   corpus          corpus verify records/min and index build                                            (300)
#   weights         weight sync s/GB, disk/tensor/distributed: trainer and kbench serve on the GPU, random
#                   Qwen3 1.2 GB fp32 (distributed: gloo, NCCL refuses 2 ranks on 1 GPU); ~2 min       (240)
#   async           smart rl vs smart rl-async step time, trainer + engine on the GPU, 20M Qwen3,
#                   32 samples x 256 tokens, 6 steps each; ~2 min                                       (240)
# Two GPUs (issue 46; one nvidia-h100-x2 hold runs them all, ~40 min: split over calls of <= 600 s):
#   mg_parity       torchrun x2 benchmarks/megatron_parallel_parity.py: TP/PP/CP=2 logprobs vs TP=1, bf16     (300)
#   mg_rl_tp2 / mg_rl_pp2 / mg_rl_cp2  one GRPO step from run_rl.sh, Megatron on both GPUs, that layout          (280 each)
#   fsdp2           torch backend, FSDP2 over 2 ranks: one SFT step (run_sft.sh) and one GRPO step (run_rl.sh)    (400)
#   disagg          weight_sync.py --server-gpu 1: trainer GPU 0, kbench serve GPU 1, NCCL vs tensor vs disk,
#                   the server's weights checked equal to the trainer's after each                           (300)
#   eval_2gpu       kbench eval of the 40 bundled solutions on 2 GPUs, then on 1: candidates/min and ratio       (560)
#   recipe_2gpu     configs/rl_qwen3_8b_layout_2gpu.yaml, one multi-turn GRPO step (benchmarks/recipe_step.py):
#                   peak memory per GPU, seconds per phase, weight-sync GB/s                                 (400)
# Four GPUs (issue 47 while no 8-GPU kind is lent): recipe_8gpu_model, then recipe_4gpu: configs/rl_qwen3_8b_layout_4gpu.yaml
#   (the recipe's TP2 x CP2 actor on all four, its two engines on the actor's first two GPUs), same printout      (590)
# Eight GPUs (issue 47): recipe_8gpu_model (random Qwen3-8B, bf16, kept in /tmp; ~2 min, 300) in one call,
#   then recipe_8gpu: configs/rl_qwen3_8b_megatron.yaml as committed but max_new_tokens 1024, same printout (590)
#   learning_start  the learning run, detached with setsid: it outlives this call, but only
#                   while the machine stays held (at most 30 minutes, and 30 s idle between calls), so
#                   keep making calls until it is done; carry runs/learn_gpu_synth.tgz to skip synth;
#                   LEARNING_OVERRIDES="synth.solution_style=inline sft.num_steps=1200" passes key=values;
#                   LEARNING_CONFIG=configs/learn_speed_gpu.yaml runs the speed stage instead (its own set in the tgz)
#   learning_status how far the detached learning run is; copies its reports, curves and the evaluations' samples
#   agreement       after learning_start's GRPO: the last rollouts' distinct kernels judged by the interpreter,
#                   GPU Evaluators with timing off, and the full GPU evaluator: samples/s, agreement (400).
#                   On a later machine (a quiet GPU): carry runs/learn_gpu_rollouts.tgz (rl/rollouts/ of a learning
#                   run, packed by learning_status) with runs/learn_gpu_synth.tgz, and it unpacks both first
#   tests_start     every gpu-marked test under GPU_TESTS_PATHS (default: the evaluator's, the adversarial
#                   suites, data, tensor payloads), detached like learning_start, on GPU_TESTS_DEVICE (default 1);
#                   the timing-sensitive files run first. Not beside a learning run: they share its cores
#                   (run 9's evaluations judged ten times slower than run 8's, most likely because they ran
#                   one CPU evaluator, not 14: a launcher bug fixed on 2026-12-07)
#   tests_status    how far the detached tests are; copies their log and junit XML
#   suite_compare_start  the bundled suite (trusted timing, 1 pass, cold caches) in this tree and in the trees
#                   carried as runs/suite_NAME.tgz (git archive of an earlier revision), one after another on
#                   SUITE_DEVICE (default 0), this tree first and last: candidates/min and overhead side by side
#                   (SUITE_ORDER="head before43 before43 head" sets the order; SUITE_ARGS replaces
#                   "--device cuda --passes 1", e.g. for a CPU smoke run). Make an archive off the device with
#                   git archive --format=tar.gz -o runs/suite_before43.tgz 42a9ae0^ -- . ':!benchmarks/results' ':!docs'
#                   and carry it
#   suite_compare_status  how far it is; copies each run's JSON (work/suite_compare_NAME_I.json)
#   chain_start     the steps in CHAIN_STEPS one after another, detached like learning_start (so a second GPU pair
#                   works beside a learning run): CHAIN_STEPS="mg_parity fsdp2" CUDA_VISIBLE_DEVICES=2,3 ...
#   chain_status    how far the chain is; copies its step logs and JSONs into work/chain/
# A machine is held at most 30 minutes and goes back after 30 s idle: chain the calls (read results after the
# hold; a session lost a whole x4 hold, its learning run included, to one pause between calls). On an x4 machine
# one hold fits the learning run on GPUs 0-1 (cores 0-27) and a chain of two-GPU steps on GPUs 2-3 (cores 28-63),
# each call ending with learning_status chain_status. Step times on one
# H100, for planning: gpu_tests ~500 s, check_latency ~100 s, corpus ~220 s, megatron ~350 s, suite_trusted
# ~450 s, suite_events ~200 s, suite_4w ~200-250 s, async ~220 s, the learning run ~25 minutes of stages.
# One machine fits gpu_tests + suite_trusted + suite_events + suite_4w; another the learning run
# (poll with learning_status; run nothing timing-sensitive beside it)
# and then weights + async.
# On the device first install the wheels it lacks (see ../shared/device/make-wheels.sh) and put
# them on PYTHONPATH. At the end everything under OUT_DIR/work is packed into OUT_DIR/gpu_pending.tgz (the device tool
# returns at most 8 files), and a one-line status per step is printed.
set -u
out=${1:?usage: bash benchmarks/gpu_pending.sh OUT_DIR STEP [STEP ...]}
shift
[ $# -gt 0 ] || { awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 2; }
py=${PYTHON:-python3}
work="$out/work"
mkdir -p "$work"
export PYTHONUNBUFFERED=1
compare=/tmp/tritonforge_suite_compare  # the detached before/after suite runs
learn=/tmp/tritonforge_learning  # the detached run lives outside $OUT, which each call empties
chain=/tmp/tritonforge_chain  # the detached chain of steps, likewise
tests=/tmp/tritonforge_gpu_tests  # the detached tests, likewise

run() {  # step seconds command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$work/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s (log: work/$name.log)"
}

for step in "$@"; do
  case $step in
    gpu_tests) run gpu_tests 580 bash benchmarks/evaluator_gpu_check.sh "$work/evaluator" ;;
    suite_trusted) run suite_trusted 560 "$py" benchmarks/eval_harness.py --device cuda --passes 2 \
        --out "$work/eval_harness_trusted_h100.json" ;;
    suite_events) run suite_events 300 "$py" benchmarks/eval_harness.py --device cuda --passes 1 \
        --timing-mode events --out "$work/eval_harness_events_h100.json" ;;
    suite_4w) run suite_4w 560 "$py" benchmarks/eval_harness.py --device cuda --passes 2 --evaluators-per-device 4 \
        --out "$work/eval_harness_4w_h100.json" ;;
    suite_8w) run suite_8w 560 "$py" benchmarks/eval_harness.py --device cuda --passes 2 --evaluators-per-device 8 \
        --out "$work/eval_harness_8w_h100.json" ;;
    suite_8w_no_launchers) KBENCH_LAUNCHER_CACHE=0 run suite_8w_no_launchers 560 "$py" benchmarks/eval_harness.py \
        --device cuda --passes 2 --evaluators-per-device 8 --out "$work/eval_harness_8w_no_launchers_h100.json" ;;
    check_latency) run check_latency 240 "$py" benchmarks/check_latency.py --device cuda:0 --repeats 3 \
        --out "$work/check_latency_h100.json" ;;
    engine) run engine 500 "$py" benchmarks/engine_throughput.py --device cuda --reps 2 --out "$work/engine_throughput_h100.json" ;;
    megatron) run megatron_tests 300 "$py" -m pytest -v -rfE --tb=short -p no:cacheprovider \
                  tests/smart/test_megatron_gpu.py
              run megatron_throughput 260 "$py" benchmarks/train_throughput.py --quick \
                  --out "$work/train_throughput_h100.json" ;;
    megatron_driver)  # GRPO through smart.train with the embedded engine; stacks dumped if it stalls
      run megatron_driver 280 "$py" -m pytest -v -s -rfE --tb=short -p no:cacheprovider \
          -o faulthandler_timeout=150 tests/smart/test_megatron_gpu.py -k driver
      tar czf "$work/megatron_driver_ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null ;;
    megatron_rl)  # one GRPO step from the launcher, a random tiny Qwen3, rewards that vary within the group
      "$py" scripts/make_tiny_model.py --out /tmp/tiny_megatron > /dev/null 2>&1
      run megatron_rl 280 bash scripts/run_rl.sh configs/rl_small_megatron_gpu.yaml model_path=/tmp/tiny_megatron \
          out_dir=/tmp/rl_megatron num_steps=1 eval_every=0 'data.problems=["L1_1_ReLU"]' rollout.max_new_tokens=16 \
          rollout.n_samples_per_prompt=4 rollout.prompts_per_step=1 rollout.filter_fn= \
          reward.reward_fn=tests.smart.test_megatron_gpu:varied_rewards ;;
    throughput_profile) run throughput_profile 500 "$py" benchmarks/train_throughput.py --models qwen3-1.7b --samples 16 \
        --steps 3 --profile --variants megatron torch torch:fused_optimizer=false torch:micro_batch_tokens=16384 torch:compile_layers=true \
        --out "$work/train_throughput_profile.json"
      tail -n 16 "$work/throughput_profile.log" ;;
    megatron_throughput)  # both Qwen3 shapes (0.6B, 1.7B), both backends, in one process
      run megatron_throughput_full 500 "$py" benchmarks/train_throughput.py --samples 16 --steps 3 \
          --out "$work/train_throughput_full_h100.json" ;;
    corpus) run corpus 300 "$py" benchmarks/corpus_throughput.py --device cuda --out "$work/corpus_throughput_h100.json" ;;
    weights) run weights 240 "$py" benchmarks/weight_sync.py --device cuda --hidden 2048 --layers 8 --repeats 3 \
        --out "$work/weight_sync_h100.json" ;;
    async) run async 240 "$py" benchmarks/async_step_time.py --device cuda --vocab-size 4096 --hidden 512 --layers 8 \
        --prompts 4 --group 8 --max-new-tokens 256 --steps 6 --out "$work/async_step_time_h100.json" ;;
    mg_parity) run mg_parity 300 torchrun --standalone --nproc_per_node 2 benchmarks/megatron_parallel_parity.py \
        --out "$work/megatron_parity.json" ;;
    mg_rl_tp2|mg_rl_pp2|mg_rl_cp2)  # the layout's size 2 over both GPUs, the engine colocated on GPU 0
      dim=${step#mg_rl_}; dim=${dim%2}
      "$py" scripts/make_tiny_model.py --out /tmp/tiny_megatron > /dev/null 2>&1
      run "$step" 280 bash scripts/run_rl.sh configs/rl_small_megatron_gpu.yaml model_path=/tmp/tiny_megatron \
          out_dir="/tmp/rl_$step" resume=false num_steps=1 eval_every=0 'data.problems=["L1_1_ReLU"]' \
          rollout.max_new_tokens=16 rollout.n_samples_per_prompt=4 rollout.prompts_per_step=1 rollout.filter_fn= \
          reward.reward_fn=smart.reward.controls:length_reward cluster.actor_ranks=2 "train.$dim=2"
      tail -n 3 "$work/$step.log" ;;
    fsdp2)  # FSDP2 over two ranks (one GPU each), the engine colocated on GPU 0
      "$py" scripts/make_tiny_model.py --out /tmp/tiny_fsdp2 --hidden 512 --layers 8 > /dev/null 2>&1
      run fsdp2_sft 200 bash scripts/run_sft.sh configs/sft_small_gpu.yaml model_path=/tmp/tiny_fsdp2 \
          out_dir=/tmp/sft_fsdp2 resume=false num_steps=1 cluster.actor_ranks=2 cluster.gpus_per_bundle=1
      run fsdp2_rl 200 bash scripts/run_rl.sh configs/rl_small_gpu.yaml model_path=/tmp/tiny_fsdp2 \
          out_dir=/tmp/rl_fsdp2 resume=false num_steps=1 eval_every=0 'data.problems=["L1_1_ReLU"]' \
          rollout.max_new_tokens=32 rollout.n_samples_per_prompt=4 rollout.prompts_per_step=1 rollout.filter_fn= \
          reward.reward_fn=smart.reward.controls:length_reward cluster.actor_ranks=2 cluster.gpus_per_bundle=1
      tail -n 3 "$work/fsdp2_sft.log" "$work/fsdp2_rl.log" ;;
    disagg) run disagg 300 "$py" benchmarks/weight_sync.py --device cuda --server-gpu 1 --hidden 2048 --layers 8 \
        --repeats 3 --out "$work/weight_sync_2gpu.json"
      tail -n 8 "$work/disagg.log" ;;
    eval_2gpu) PY=$py run eval_2gpu 560 bash -c '
        runs=$(mktemp -d); t=$(date +%s)
        for level in 1 2 3; do "$PY" -m kbencheval.cli generate run_name=ref runs_dir=$runs server_type=reference level=$level; done
        for n in 2 1; do  # two GPUs first: a warm cache can only favour the one-GPU run
          cp -r $runs/ref $runs/ref_$n; s=$SECONDS
          TRITON_CACHE_DIR=$(mktemp -d) "$PY" -m kbencheval.cli eval run_name=ref_$n runs_dir=$runs device=cuda num_gpus=$n
          echo "$n $(wc -l < $runs/ref_$n/results.jsonl) $((SECONDS - s))" >> $runs/times
          cp $runs/ref_$n/results.jsonl '"$work"'/eval_2gpu_results_$n.jsonl  # eval_seconds per candidate: start-up vs straggler
        done
        "$PY" -c "import json,sys; r={int(n): {\"candidates\": int(c), \"seconds\": float(s), \"per_min\": 60*int(c)/float(s)}
for n, c, s in (l.split() for l in open(sys.argv[1]))}; r[\"ratio_2_over_1\"]=r[2][\"per_min\"]/r[1][\"per_min\"]
print(json.dumps(r)); json.dump(r, open(sys.argv[2], \"w\"), indent=2)" $runs/times '"$work/eval_2gpu.json"
      tail -n 1 "$work/eval_2gpu.log" ;;
    recipe_2gpu) run recipe_2gpu 400 "$py" benchmarks/recipe_step.py configs/rl_qwen3_8b_layout_2gpu.yaml --shape small \
        --timeout 360 --out "$work/recipe_2gpu.json"
      tail -n 6 "$work/recipe_2gpu.log" ;;
    recipe_8gpu_model) run recipe_8gpu_model 300 "$py" benchmarks/recipe_step.py configs/rl_qwen3_8b_megatron.yaml \
        --shape qwen3-8b --model /tmp/tritonforge_qwen3_8b --build-only ;;
    recipe_4gpu) run recipe_4gpu 590 "$py" benchmarks/recipe_step.py configs/rl_qwen3_8b_layout_4gpu.yaml --shape qwen3-8b \
        --model /tmp/tritonforge_qwen3_8b --timeout 540 --out "$work/recipe_4gpu.json"
      tail -n 12 "$work/recipe_4gpu.log" ;;
    recipe_8gpu) run recipe_8gpu 590 "$py" benchmarks/recipe_step.py configs/rl_qwen3_8b_megatron.yaml --shape qwen3-8b \
        --model /tmp/tritonforge_qwen3_8b --timeout 540 --out "$work/recipe_8gpu.json" rollout.max_new_tokens=1024
      tail -n 12 "$work/recipe_8gpu.log" ;;
    learning_start)
      rm -rf "$learn" && mkdir -p "$learn/run"
      # A synthetic set prepared off the device (carry runs/learn_gpu_synth.tgz): its stage is then skipped.
      [ -f runs/learn_gpu_synth.tgz ] && tar xzf runs/learn_gpu_synth.tgz -C "$learn/run"
      # The run reads its scripts from a copy: later calls replace the working tree it was started from.
      cp -a . "$learn/src"
      # shellcheck disable=SC2086  # LEARNING_OVERRIDES is a list of key=value words
      (cd "$learn/src" && setsid nohup bash scripts/run_learning.sh "${LEARNING_CONFIG:-configs/learn_synth_gpu.yaml}" "$learn/run" \
          ${LEARNING_OVERRIDES:-} > "$learn/log" 2>&1 &)
      echo "== learning_start: started; poll with the learning_status step" ;;
    learning_status)
      cp "$learn/log" "$work/learning.log" 2>/dev/null
      cp "$learn"/run/summary.json "$learn"/run/stage_seconds.txt "$learn"/run/sft/probes.txt "$learn"/run/evals/*.json \
         "$work/" 2>/dev/null
      (cd "$learn/run" && tar czf "$work/learning_tb.tgz" $(ls -d sft/tb rl*/tb sft_continued/tb 2>/dev/null)) \
          2>/dev/null
      [ -d "$learn/run/plots" ] && tar czf "$work/learning_plots.tgz" -C "$learn/run" plots
      # the evaluations' samples and verdicts, so learning_compare.py's per-style tables can be made off the device
      # when the hold ends before the run does (run 13's did)
      (cd "$learn/run" && tar czf "$work/learning_evals.tgz" $(ls -d evals/*/results.jsonl evals/*/generations)) \
          2>/dev/null
      # the GRPO run's last rollouts, once it has finished (not a file mid-write, and not again on every poll), for
      # the agreement step on a quiet machine later (runs/learn_gpu_rollouts.tgz)
      if [ -f "$learn/run/rl/hf/config.json" ] && [ ! -f "$learn/rollouts_packed.tgz" ]; then
        (cd "$learn/run" && tar czf "$learn/rollouts_packed.tgz" $(ls rl/rollouts/step_*.jsonl | tail -n 2)) 2>/dev/null
      fi
      cp "$learn/rollouts_packed.tgz" "$work/learn_gpu_rollouts.tgz" 2>/dev/null
      # a set made on the device (none carried), packed once it is complete: later holds carry it back
      if [ -f "$learn/run/synth/manifest.json" ] && [ ! -f "$learn/synth_packed.tgz" ]; then
        tar czf "$learn/synth_packed.tgz" -C "$learn/run" synth
      fi
      cp "$learn/synth_packed.tgz" "$work/learn_gpu_synth.tgz" 2>/dev/null
      # the machine's load beside the run: when run 9's evaluations slowed tenfold, nothing recorded why
      { uptime; ps -eo pcpu,rss,etimes,args --sort=-pcpu | head -n 25 | cut -c1-200; } >> "$work/learning_load.txt"
      echo "== learning_status: $(tail -n 1 "$learn/log" 2>/dev/null || echo 'no run started')" ;;
    agreement)
      if [ ! -d "$learn/run/rl/rollouts" ] && [ -f runs/learn_gpu_rollouts.tgz ]; then
        mkdir -p "$learn/run" && tar xzf runs/learn_gpu_synth.tgz -C "$learn/run" && tar xzf runs/learn_gpu_rollouts.tgz -C "$learn/run"
      fi
      run agreement 400 "$py" benchmarks/reward_agreement.py "$learn/run/rl/rollouts" \
        --problems "$learn/run/synth/train" --limit 200 --out "$work/reward_agreement.json"
      tail -n 8 "$work/agreement.log" ;;
    tests_start)
      rm -rf "$tests" && mkdir -p "$tests" && cp -a . "$tests/src"
      timing_first="tests/evaluator/test_gpu_timer.py tests/evaluator/test_timing_paths.py"
      # shellcheck disable=SC2086  # the path lists are words
      (cd "$tests/src" && CUDA_VISIBLE_DEVICES=${GPU_TESTS_DEVICE:-1} setsid nohup timeout 1500 "$py" -m pytest -m gpu -q --continue-on-collection-errors \
          -rfE --tb=short -p no:cacheprovider --junitxml="$tests/junit.xml" $timing_first \
          ${GPU_TESTS_PATHS:-tests/evaluator tests/adversarial tests/data tests/smart/test_tensor_payloads.py} > "$tests/log" 2>&1 &)
      echo "== tests_start: started on GPU ${GPU_TESTS_DEVICE:-1}; poll with the tests_status step" ;;
    tests_status)
      cp "$tests/log" "$work/gpu_tests.log" 2>/dev/null; cp "$tests/junit.xml" "$work/gpu_tests_junit.xml" 2>/dev/null
      echo "== tests_status: $(tail -n 1 "$tests/log" 2>/dev/null || echo 'no tests started')" ;;
    suite_compare_start)
      rm -rf "$compare" && mkdir -p "$compare/head" && cp -a . "$compare/head"
      trees="head"
      for archive in runs/suite_*.tgz; do
        [ -f "$archive" ] || continue
        name=$(basename "$archive" .tgz); name=${name#suite_}
        mkdir -p "$compare/$name" && tar xzf "$archive" -C "$compare/$name" && trees="$trees $name"
      done
      order=${SUITE_ORDER:-$trees head}
      case $py in */*) py_abs=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") ;; *) py_abs=$py ;; esac
      # each run in its own Triton and Inductor caches: every revision compiles from cold
      (cd "$compare" && CUDA_VISIBLE_DEVICES=${SUITE_DEVICE:-0} PY=$py_abs ARGS=${SUITE_ARGS:---device cuda --passes 1} setsid nohup bash -c '
          i=0
          for tree in '"$order"'; do
            i=$((i + 1)); caches=$(mktemp -d)
            echo "== $(date -u +%T) run $i: $tree"
            (cd "$tree" && TRITON_CACHE_DIR=$caches/triton TORCHINDUCTOR_CACHE_DIR=$caches/inductor timeout 500 \
                "$PY" benchmarks/eval_harness.py $ARGS --out "../result_${tree}_$i.json" \
                > "../log_${tree}_$i.txt" 2>&1)
            echo "== $(date -u +%T) run $i: $tree exit $?"
          done
          echo "suite_compare done"' > "$compare/log" 2>&1 &)
      echo "== suite_compare_start: $order on GPU ${SUITE_DEVICE:-0}" ;;
    suite_compare_status)
      for f in "$compare"/result_*.json; do [ -f "$f" ] && cp "$f" "$work/suite_compare_$(basename "$f" | cut -c8-)"; done
      cp "$compare/log" "$work/suite_compare.log" 2>/dev/null
      tail -n 2 "$compare"/log_*.txt > "$work/suite_compare_tails.txt" 2>/dev/null
      echo "== suite_compare_status: $(tail -n 1 "$compare/log" 2>/dev/null || echo 'not started')" ;;
    chain_start)
      rm -rf "$chain" && mkdir -p "$chain" && cp -a . "$chain/src"
      (cd "$chain/src" && setsid nohup bash -c "bash benchmarks/gpu_pending.sh '$chain/out' ${CHAIN_STEPS:?}; echo chain done" \
          > "$chain/log" 2>&1 &)
      echo "== chain_start: $CHAIN_STEPS on GPUs ${CUDA_VISIBLE_DEVICES:-all}" ;;
    chain_status)
      mkdir -p "$work/chain" && cp -r "$chain/out/work/." "$work/chain/" 2>/dev/null; cp "$chain/log" "$work/chain.log" 2>/dev/null
      echo "== chain_status: $(grep -c '^== ' "$chain/log" 2>/dev/null) steps ended; last line: $(tail -n 1 "$chain/log" 2>/dev/null)" ;;
    *) echo "unknown step '$step'; steps are listed at the top of $0"; exit 2 ;;
  esac
done
tar czf "$out/gpu_pending.tgz" -C "$work" . && echo "packed $out/gpu_pending.tgz"
