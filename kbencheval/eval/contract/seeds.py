"""Seeds of an evaluation, drawn when it runs so that no candidate can know its inputs in advance.

`RunSeeds.draw()` uses a CSPRNG (`secrets`); `RunSeeds.draw(seed=N)` reproduces a run. One draw may
serve a whole batch (an RL group, a benchmark run): `Evaluator.new_batch_seeds()` after the
candidates were generated, then `evaluate(..., seeds=batch)` for each, so the judge computes the
reference outputs once per batch.
"""

from __future__ import annotations

import dataclasses
import random
import secrets

from kbencheval.dataset import INPUT_DOMAINS
from kbencheval.eval.contract.protocol import Trial

# Stress transform -> the INPUT_DOMAINs it is valid for. Here, not beside the transforms in
# kbencheval.eval.contract.inputs, because the trusted harness picks the trials and does not import torch.
STRESS_DOMAINS = {
    "x0.01": {"any", "positive", "unit_scale"},
    "x10": {"any", "positive"},
    "x100": {"any", "positive"},
    "shift+3": {"any", "positive"},
    "shift-3": {"any"},
}
STRESS_NAMES = tuple(STRESS_DOMAINS)


def stress_names(domain: str) -> list[str]:
    """The stress trials a problem with this INPUT_DOMAIN gets."""
    if domain not in INPUT_DOMAINS:
        raise ValueError(f"INPUT_DOMAIN {domain!r} is unknown: use one of {', '.join(INPUT_DOMAINS)}")
    return [name for name, domains in STRESS_DOMAINS.items() if domain in domains]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSeeds:
    model: dict  # {"init": int, "model": int}: weights of Model and ModelNew
    trials: tuple[Trial, ...]  # the problem's own get_inputs()
    stress: tuple[Trial, ...]  # one per stress transform; the problem's INPUT_DOMAIN filters them
    timing: tuple[Trial, ...]  # rotated through the timed calls
    post_timing: tuple[Trial, ...]  # checked after timing

    @classmethod
    def draw(cls, *, trials: int, timing_sets: int, seed: int | None = None) -> "RunSeeds":
        rng = random.Random(seed) if seed is not None else secrets.SystemRandom()
        new = lambda: rng.getrandbits(62)  # noqa: E731
        return cls(
            model={"init": new(), "model": new()},
            trials=tuple(Trial(seed=new()) for _ in range(trials)),
            stress=tuple(Trial(seed=new(), stress=name) for name in STRESS_NAMES),
            timing=tuple(Trial(seed=new()) for _ in range(timing_sets)),
            post_timing=(Trial(seed=new()),),
        )

    def correctness_trials(self, stress_names: list[str]) -> list[Trial]:
        return list(self.trials) + [t for t in self.stress if t.stress in stress_names]

    def record(self) -> dict:
        """What a verdict's checks["seeds"] holds: enough to rerun every input exactly."""
        return {"model": dict(self.model), "trials": [t.key for t in self.trials],
                "stress": [t.key for t in self.stress], "timing": [t.key for t in self.timing],
                "post_timing": [t.key for t in self.post_timing]}
