"""Report fast_p, pass@k and speedups for an evaluated run, with KernelBench's arguments.

    python scripts/benchmark_eval_analysis.py run_name=qwen_l1 level=1 hardware=H100 baseline=baseline_time_torch
    (same as `kbench report qwen_l1`; add json=True for machine output)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without pip install

from kbencheval.bench import report
from kbencheval.bench.common import translate_kernelbench_args

_SAME_RUN = "speedups are measured against the PyTorch reference in the same run, on the same device"
IGNORED = {
    "hardware": _SAME_RUN,
    "baseline": _SAME_RUN,
    "baseline_file": _SAME_RUN,
    "level": "the report has a table per level of the run",
}

if __name__ == "__main__":
    sys.exit(report.main(translate_kernelbench_args(sys.argv[1:], {}, IGNORED)))
