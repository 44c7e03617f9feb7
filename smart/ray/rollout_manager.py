"""`RolloutManager`: one Ray actor that owns the engines, the data source and the eval pool.

    manager = RolloutManager.remote(cfg, placement.rollout)
    samples, metrics = ray.get(manager.rollout.remote(step))   # generate, evaluate, reward, returns

Only `Sample`s cross its boundary, once per step. Engines are whatever `rollout.engine` names
(smart.rollout.engines); the generate and reward hooks are plain functions named by dotted paths.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict

import ray

from kbencheval.eval import EvalResult
from kbencheval.llm.base import Completion, SamplingParams, encode_chat
from smart.algo import discounted_returns
from smart.algo.overlong import apply_overlong
from smart.config import RLConfig, load_plugin
from smart.ray.placement import Slot
from smart.reward.metrics import rollout_metrics, verdict_rates
from smart.reward.pool import reward_pool
from smart.reward.presets import preset_rewards
from smart.rollout.data import DataSource
from smart.rollout.engines import engine_kind
from smart.rollout.health import EngineFleet
from smart.rollout.generate import RolloutContext, generate_multi_turn, generate_single_turn
from smart.rollout.refill import fill_groups
from smart.sample import Sample


@ray.remote(num_cpus=0)
class RolloutManager:
    def __init__(self, cfg: RLConfig, slots: list[Slot], data_state: dict | None = None,
                 reward_slots: list[Slot] | None = None):
        from transformers import AutoTokenizer

        from kbencheval.prompts import feedback_message, prompt_builder

        self.cfg, self.rc = cfg, cfg.rollout
        self.build_prompt = prompt_builder(backend=self.rc.kernel_language, style=self.rc.prompt_style,
                                           raicl_index=self.rc.raicl_index, raicl_k=self.rc.raicl_k,
                                           raicl_model=self.rc.raicl_model)
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
        self.data = DataSource(cfg.data, seed=cfg.seed)
        self.groups_drawn = 0  # prompts drawn so far; each gets its own group_index
        if data_state:
            self.data.load_state(data_state)
            self.groups_drawn = data_state.get("groups_drawn", 0)  # group ids as an uninterrupted run numbers them
        self.kind = engine_kind(self.rc.engine)
        self.fleet = EngineFleet(self.kind, cfg, slots)  # the engines, restarted or dropped when they die
        self.weights_version = 0  # the version the last sync_weights recorded; engines must serve it
        self.pool = reward_pool(cfg.reward, reward_slots)
        default_generate = generate_multi_turn if self.rc.max_turns > 1 else generate_single_turn
        self.generate_fn = load_plugin(self.rc.generate_fn, "rollout.generate_fn") if self.rc.generate_fn else default_generate
        self.reward_fn = load_plugin(cfg.reward.reward_fn, "reward.reward_fn") if cfg.reward.reward_fn else preset_rewards
        self.step, self.calls = 0, 0  # engine calls within the step; with the step they set the sampling seed
        self.eval_seconds = 0.0
        self.gen_tokens = 0
        self.ctx = RolloutContext(self.rc, self.tokenizer, self._generate, self._evaluate, feedback_message)

    # ---- what generate functions see through RolloutContext ----
    def _generate(self, prompt_ids: list[list[int]], temperature: float | None = None) -> list[Completion]:
        params = SamplingParams(
            temperature=self.rc.temperature if temperature is None else temperature,
            top_p=self.rc.top_p, max_new_tokens=self.rc.max_new_tokens,
            seed=sampling_seed(self.cfg.seed, self.step, self.calls),
        )
        self.calls += 1
        engines = self.fleet.engines
        n = len(engines)
        size = -(-len(prompt_ids) // n)
        chunks = [prompt_ids[i * size : (i + 1) * size] for i in range(n)]
        refs = [e.generate_ids.remote(chunk, _offset_seed(params, i * size)) for i, (e, chunk) in enumerate(zip(engines, chunks)) if chunk]
        out = [c for part in ray.get(refs) for c in part]
        self.gen_tokens += sum(len(c.token_ids or []) for c in out)
        return out

    def _evaluate(self, items: list[tuple[str, str]]) -> list[EvalResult]:
        t0 = time.perf_counter()
        jobs = [(self.data.by_key[key], text) for key, text in items]
        results = self.pool.evaluate(jobs, self.rc.kernel_language)
        self.eval_seconds += time.perf_counter() - t0
        return results

    def _new_samples(self, problems, group_size: int, start_group: int = 0) -> list[Sample]:
        samples = []
        for g, problem in enumerate(problems):
            messages = self.build_prompt(problem.source)
            ids = encode_chat(self.tokenizer, messages)
            for _ in range(group_size):
                samples.append(Sample(index=len(samples), group_index=start_group + g, problem_key=problem.key,
                                      prompt=messages, prompt_token_ids=list(ids)))
        return samples

    # ---- what the training loop calls ----
    def rollout(self, step: int, n_prompts: int | None = None) -> tuple[list[Sample], dict]:
        """Samples of n_prompts (default prompts_per_step) new prompts, generated, evaluated and
        rewarded (reward = discounted return). A step may call it again to refill filtered groups."""
        t0, shared_before = time.perf_counter(), self.pool.deduplicated
        samples, metrics = self.generate(step, n_prompts)
        t1 = time.perf_counter()
        samples, reward_metrics = self.reward(samples)
        return samples, metrics | reward_metrics | {"time/generate": t1 - t0, "time/reward": time.perf_counter() - t1,
                                                    "eval/shared_verdicts": float(self.pool.deduplicated - shared_before)}

    def generate(self, step: int, n_prompts: int | None = None) -> tuple[list[Sample], dict]:
        """Samples for step `step` from the generate function, not yet rewarded (multi-turn ones are evaluated)."""
        t0 = time.perf_counter()
        engine_metrics = self.fleet.check()  # between steps: dead engines are restarted or dropped
        self.eval_seconds, self.gen_tokens = 0.0, 0
        if step != self.step:  # a refill round of the same step keeps counting, so it gets fresh seeds
            self.step, self.calls = step, 0  # a resumed run draws what a fresh run would have drawn at this step
        problems = self.data.next_problems(n_prompts or self.rc.prompts_per_step)
        first_group, self.groups_drawn = self.groups_drawn, self.groups_drawn + len(problems)
        served = self._served_version()
        samples = self.generate_fn(self.ctx, self._new_samples(problems, self.rc.n_samples_per_prompt, first_group))
        if self._served_version() != served:
            raise RuntimeError(f"engines changed weights during step {step}'s generation (from version {served}); "
                               "a driver must sync weights only between rollouts")
        for i, s in enumerate(samples):
            s.index = i
            s.weight_version = served
        seconds = time.perf_counter() - t0
        gen_seconds = seconds - self.eval_seconds
        return samples, engine_metrics | {
            "time/generate_eval": self.eval_seconds,  # multi-turn evaluates between turns
            "perf/generate_tokens_per_s": self.gen_tokens / max(gen_seconds, 1e-9),
            "rollout/generated_tokens": float(self.gen_tokens),
        }

    def fill(self, step: int) -> tuple[list[Sample], list[Sample], dict]:
        """A whole step's batch in one call: rollout, then `fill_groups` (filter and refill) here, so a
        driver that keeps this call in flight sees one atomic draw (smart/train_async.py)."""
        t0 = time.time()
        filter_fn = load_plugin(self.rc.filter_fn, "rollout.filter_fn") if self.rc.filter_fn else None
        draw = lambda n: self.rollout(step, n)  # noqa: E731
        kept, samples, metrics = fill_groups(draw, filter_fn, self.rc.prompts_per_step, self.rc.refill_max_rounds,
                                             self.rc.group_by)
        return kept, samples, metrics | {"clock/rollout_start": t0, "clock/rollout_end": time.time()}

    def reward(self, samples: list[Sample]) -> tuple[list[Sample], dict]:
        """Evaluate what has no EvalResult yet, shape rewards, then turn them into discounted returns."""
        self.eval_seconds = 0.0
        todo = [s for s in samples if s.eval_result is None]
        for s, result in zip(todo, self._evaluate([(s.problem_key, s.response_text) for s in todo])):
            s.eval_result = result
        rewards = self.reward_fn(self.cfg.reward, samples)
        if len(rewards) != len(samples):
            raise ValueError(f"reward_fn returned {len(rewards)} rewards for {len(samples)} samples; return one per sample")
        rc = self.rc
        rewards = apply_overlong(samples, [float(r) for r in rewards], rc.overlong, rc.max_new_tokens,
                                 rc.overlong_buffer, rc.overlong_penalty)
        assign_returns(samples, rewards, rc.gamma)
        return samples, {"time/reward_eval": self.eval_seconds, **rollout_metrics(samples)}

    def evaluate_heldout(self) -> dict:
        """One greedy single-turn answer per held-out problem; rates only (no training signal)."""
        if not self.data.heldout:
            return {}
        samples = self._new_samples(self.data.heldout, 1)
        completions = self._generate([s.prompt_token_ids for s in samples], temperature=0.0)
        results = self._evaluate([(s.problem_key, c.text) for s, c in zip(samples, completions)])
        rates = verdict_rates("heldout/", results)
        return {k: rates[k] for k in ("heldout/compile_rate", "heldout/correct_rate")} | {"heldout/problems": float(len(results))}

    def weight_targets(self) -> tuple:
        """(this engine kind's WeightSink, the live engine handles): what `sync_weights` pushes through."""
        self.fleet.check()  # an engine that died while the trainer stepped is replaced before the push
        return self.kind.weights_sink(self.cfg), self.fleet.engines

    def record_weights_version(self, version: int, packed: list | None = None) -> None:
        """Called by `sync_weights` once every engine serves `version` (pushed as packed[0]); later samples
        carry it, and an engine restarted later is sent the same weights."""
        self.weights_version = version
        self.fleet.record(version, packed[0] if packed else None)

    def check_engines(self) -> dict:
        """Ping every engine now (generate() does it each call); engines/alive, restarts, drops."""
        return self.fleet.check()

    def weights_versions(self) -> list[int]:
        return ray.get([e.weights_version.remote() for e in self.fleet.engines])

    def _served_version(self) -> int:
        """The version every engine serves (what samples are stamped with); it must be the last one synced."""
        versions = self.weights_versions()
        if set(versions) != {self.weights_version}:
            raise RuntimeError(f"engines serve weights versions {versions} but the last sync recorded "
                               f"{self.weights_version}; weights reach engines only through sync_weights")
        return self.weights_version

    def engine_state_dict(self, i: int = 0) -> dict:
        return ray.get(self.fleet.engines[i].state_dict.remote())

    def data_state(self) -> dict:
        return {**self.data.state(), "groups_drawn": self.groups_drawn}

    def shutdown(self) -> None:
        self.pool.close()
        self.fleet.shutdown()


def sampling_seed(run_seed: int, step: int, call: int) -> int:
    """Base seed of one engine call (rows add their index): a function of the run seed, the step and the
    call within the step only, so a resumed run samples like an uninterrupted one."""
    digest = hashlib.sha256(f"{run_seed}:{step}:{call}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x3FFFFFFF  # rows add small offsets; stay below 2**31


def _offset_seed(params: SamplingParams, offset: int) -> SamplingParams:
    return SamplingParams(params.temperature, params.top_p, params.max_new_tokens, params.n,
                          None if params.seed is None else params.seed + offset)


def assign_returns(samples: list[Sample], turn_rewards: list[float], gamma: float) -> None:
    """Set each sample's reward to its discounted return R_t = r_t + gamma * R_{t+1} along its trajectory.

    Single-turn samples are trajectories of length one, so their return is their own reward.
    """
    trajectories: dict = defaultdict(list)
    for s, r in zip(samples, turn_rewards):
        s.turn_reward = r
        trajectories[("single", s.index) if s.trajectory_id is None else s.trajectory_id].append(s)
    for turns in trajectories.values():
        turns.sort(key=lambda s: s.turn)
        for s, ret in zip(turns, discounted_returns([s.turn_reward for s in turns], gamma)):
            s.reward = ret
