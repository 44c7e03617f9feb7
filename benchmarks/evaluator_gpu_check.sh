#!/usr/bin/env bash
# The evaluator's GPU checks in one call, each step bounded so a slow one cannot starve the rest:
# the sandbox's layers and every attack of tests/adversarial/test_sandbox.py (static checks off),
# tests/evaluator/test_gpu_harness.py (trust attacks, timing modes), and
# tests/evaluator/test_gpu_device_kernels.py (kernel names, all 40 bundled solutions, attacks) as their own
# step; each limit leaves headroom over the step's usual time. The bundled suite's timing is
# benchmarks/eval_harness.py's job.
#   bash benchmarks/evaluator_gpu_check.sh OUT_DIR
set -u
out=${1:?usage: bash benchmarks/evaluator_gpu_check.sh OUT_DIR}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() {  # name seconds command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s"
}
step sandbox 150 "$py" benchmarks/sandbox_h100_check.py --out "$out/sandbox_h100_check.json"
step gpu_tests 150 "$py" -m pytest -q -rfE -p no:cacheprovider tests/evaluator/test_gpu_harness.py
# Device-side attribution: kernel names this GPU reports (-s prints them), every bundled solution, the attacks.
step device_kernels 280 "$py" -m pytest -q -rfE -s -p no:cacheprovider tests/evaluator/test_gpu_device_kernels.py
for f in sandbox gpu_tests device_kernels; do echo "---- $f"; tail -n 25 "$out/$f.log"; done
