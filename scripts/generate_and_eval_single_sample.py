"""Generate one kernel for one problem and evaluate it (same as `kbench run-one`).

    python scripts/generate_and_eval_single_sample.py dataset_src=bundled level=1 problem_id=1 \
        server_type=openai model_name=Qwen/Qwen3-8B base_url=http://127.0.0.1:30000/v1 verbose=True
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without pip install

from kbencheval.bench import run_one
from kbencheval.bench.common import translate_kernelbench_args

ALIASES = {"dataset_name": "dataset_path", "prompt_option": "prompt_style", "timeout": "eval.timeout_s"}
IGNORED = {
    "eval_mode": "evaluation is always local, in a sandboxed worker",
    "gpu_arch": "Triton compiles for the local GPU",
    "log": "the prompt, response and verdict are printed",
    "log_prompt": "the prompt is printed",
}

if __name__ == "__main__":
    sys.exit(run_one.main(translate_kernelbench_args(sys.argv[1:], ALIASES, IGNORED)))
