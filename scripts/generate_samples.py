"""Generate samples for a level, with KernelBench's arguments (same as `kbench generate`).

    python scripts/generate_samples.py run_name=qwen_l1 dataset_src=huggingface level=1 \
        server_type=openai model_name=Qwen/Qwen3-8B base_url=http://127.0.0.1:30000/v1 num_workers=16
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without pip install

from kbencheval.bench import generate
from kbencheval.bench.common import translate_kernelbench_args

ALIASES = {"num_workers": "concurrency", "dataset_name": "dataset_path", "prompt_option": "prompt_style"}
IGNORED = {
    "api_query_interval": "the client paces and retries requests itself",
    "log_prompt": "every sample file stores its prompt",
    "store_type": "every sample is stored as JSON",
}

if __name__ == "__main__":
    sys.exit(generate.main(translate_kernelbench_args(sys.argv[1:], ALIASES, IGNORED)))
