"""`RolloutManager`: one Ray actor that owns the engines, the data source and the eval pool.

    manager = RolloutManager.remote(cfg, placement.rollout)
    samples, metrics = ray.get(manager.generate.remote(step))   # engines sample (multi-turn: eval too)
    samples, metrics = ray.get(manager.reward.remote(samples))   # eval pool scores, presets shape

Only `Sample`s cross its boundary. The generate, reward and filter hooks are plain functions named
by dotted paths in the config.
"""

from __future__ import annotations

import time
from collections import defaultdict

import ray

from kbencheval.llm.base import Completion, SamplingParams
from smart.algo import discounted_returns
from smart.config import RLConfig, load_plugin
from smart.ray.placement import Slot
from smart.reward.metrics import rollout_metrics
from smart.reward.pool import EvalPool
from smart.reward.presets import preset_rewards
from smart.rollout.data import DataSource, encode_prompt
from smart.rollout.engine import EngineActor
from smart.rollout.engines.sglang import SGLangEngineActor
from smart.rollout.generate import RolloutContext, generate_multi_turn, generate_single_turn
from smart.sample import Sample


@ray.remote(num_cpus=0)
class RolloutManager:
    def __init__(self, cfg: RLConfig, slots: list[Slot], data_state: dict | None = None,
                 reward_slots: list[Slot] | None = None):
        from transformers import AutoTokenizer

        from kbencheval.prompts import build_prompt, feedback_message

        self.cfg, self.rc = cfg, cfg.rollout
        self.build_prompt = build_prompt
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
        self.data = DataSource(cfg.data)
        if data_state:
            self.data.load_state(data_state)
        if self.rc.engine == "sglang":  # the servers run elsewhere: the actors need no reserved slot
            self.engines = [SGLangEngineActor.remote(url, cfg.model_path, self.rc.sglang_timeout_s) for url in self.rc.sglang_urls]
        else:
            device = "cuda" if cfg.cluster.num_gpus_per_worker else "cpu"
            self.engines = [EngineActor.options(**slot.options()).remote(cfg.model_path, device) for slot in slots]
        self.pool = EvalPool(cfg.reward, reward_slots)
        default_generate = generate_multi_turn if self.rc.max_turns > 1 else generate_single_turn
        self.generate_fn = load_plugin(self.rc.generate_fn, "rollout.generate_fn") if self.rc.generate_fn else default_generate
        self.reward_fn = load_plugin(cfg.reward.reward_fn, "reward.reward_fn") if cfg.reward.reward_fn else preset_rewards
        self.calls = 0  # engine calls so far; varies the sampling seed between calls
        self.eval_seconds = 0.0
        self.gen_tokens = 0
        self.ctx = RolloutContext(self.rc, self.tokenizer, self._generate, self._evaluate, feedback_message)

    # ---- what generate functions see through RolloutContext ----
    def _generate(self, prompt_ids: list[list[int]], temperature: float | None = None) -> list[Completion]:
        params = SamplingParams(
            temperature=self.rc.temperature if temperature is None else temperature,
            top_p=self.rc.top_p, max_new_tokens=self.rc.max_new_tokens,
            seed=self.rc.seed * 1_000_003 + self.calls * 10_007,
        )
        self.calls += 1
        n = len(self.engines)
        size = -(-len(prompt_ids) // n)
        chunks = [prompt_ids[i * size : (i + 1) * size] for i in range(n)]
        refs = [e.generate_ids.remote(chunk, _offset_seed(params, i * size)) for i, (e, chunk) in enumerate(zip(self.engines, chunks)) if chunk]
        out = [c for part in ray.get(refs) for c in part]
        self.gen_tokens += sum(len(c.token_ids or []) for c in out)
        return out

    def _evaluate(self, items: list[tuple[str, str]]) -> list[dict]:
        t0 = time.perf_counter()
        jobs = [(self.data.by_key[key], text) for key, text in items]
        results = self.pool.evaluate(jobs, self.rc.backend)
        self.eval_seconds += time.perf_counter() - t0
        return results

    def _new_samples(self, problems, group_size: int, start_group: int = 0) -> list[Sample]:
        samples = []
        for g, problem in enumerate(problems):
            messages = self.build_prompt(problem.source, backend=self.rc.backend, style=self.rc.prompt_style)
            ids = encode_prompt(self.tokenizer, messages)
            for _ in range(group_size):
                samples.append(Sample(index=len(samples), group_index=start_group + g, problem_key=problem.key,
                                      prompt=messages, prompt_token_ids=list(ids)))
        return samples

    # ---- the steps the training loop calls ----
    def generate(self, step: int) -> tuple[list[Sample], dict]:
        t0 = time.perf_counter()
        self.eval_seconds, self.gen_tokens = 0.0, 0
        problems = self.data.next_problems(self.rc.prompts_per_step)
        samples = self.generate_fn(self.ctx, self._new_samples(problems, self.rc.n_samples_per_prompt, step * len(problems)))
        for i, s in enumerate(samples):
            s.index = i
            s.metadata["step"] = step
        seconds = time.perf_counter() - t0
        gen_seconds = seconds - self.eval_seconds
        return samples, {
            "time/generate_eval": self.eval_seconds,  # multi-turn evaluates between turns
            "perf/generate_tokens_per_s": self.gen_tokens / max(gen_seconds, 1e-9),
            "rollout/generated_tokens": float(self.gen_tokens),
        }

    def reward(self, samples: list[Sample]) -> tuple[list[Sample], dict]:
        """Evaluate what has no EvalResult yet, shape rewards, then turn them into discounted returns."""
        self.eval_seconds = 0.0
        todo = [s for s in samples if s.eval_result is None]
        for s, result in zip(todo, self._evaluate([(s.problem_key, s.response_text) for s in todo])):
            s.eval_result = result
        rewards = self.reward_fn(self.cfg.reward, samples)
        if len(rewards) != len(samples):
            raise ValueError(f"reward_fn returned {len(rewards)} rewards for {len(samples)} samples; return one per sample")
        assign_returns(samples, [float(r) for r in rewards], self.rc.gamma)
        return samples, {"time/reward_eval": self.eval_seconds, **rollout_metrics(samples)}

    def evaluate_heldout(self) -> dict:
        """One greedy single-turn answer per held-out problem; rates only (no training signal)."""
        if not self.data.heldout:
            return {}
        samples = self._new_samples(self.data.heldout, 1)
        completions = self._generate([s.prompt_token_ids for s in samples], temperature=0.0)
        results = self._evaluate([(s.problem_key, c.text) for s, c in zip(samples, completions)])
        n = len(results)
        return {
            "heldout/compile_rate": sum(bool(r.get("compiled")) for r in results) / n,
            "heldout/correct_rate": sum(bool(r.get("correct")) for r in results) / n,
            "heldout/problems": float(n),
        }

    def update_weights(self, weights: list[ray.ObjectRef] | str, version: int) -> list[int]:
        """Embedded: `weights` is [ref], so the state dict stays in the object store until each engine
        pulls it. SGLang: `weights` is the save_pretrained folder every server loads from disk."""
        payload = weights if isinstance(weights, str) else weights[0]
        return ray.get([e.update_weights.remote(payload, version) for e in self.engines])

    def weights_versions(self) -> list[int]:
        return ray.get([e.weights_version.remote() for e in self.engines])

    def engine_state_dict(self, i: int = 0) -> dict:
        return ray.get(self.engines[i].state_dict.remote())

    def data_state(self) -> dict:
        return self.data.state()

    def shutdown(self) -> None:
        self.pool.close()
        for e in self.engines:
            ray.kill(e)


def _offset_seed(params: SamplingParams, offset: int) -> SamplingParams:
    return SamplingParams(params.temperature, params.top_p, params.max_new_tokens, params.n,
                          None if params.seed is None else params.seed + offset)


def assign_returns(samples: list[Sample], turn_rewards: list[float], gamma: float) -> None:
    """Set each sample's reward to its discounted return R_t = r_t + gamma * R_{t+1} along its trajectory.

    Single-turn samples are trajectories of length one, so their return is their own reward.
    """
    trajectories: dict = defaultdict(list)
    for s, r in zip(samples, turn_rewards):
        s.metadata["turn_reward"] = r
        trajectories[s.metadata.get("trajectory", ("single", s.index))].append(s)
    for turns in trajectories.values():
        turns.sort(key=lambda s: s.turn)
        for s, ret in zip(turns, discounted_returns([s.metadata["turn_reward"] for s in turns], gamma)):
            s.reward = ret
