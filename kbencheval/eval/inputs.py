"""Problem -> model and inputs, identically in the worker and the judge (pure functions, no state).

A `Trial` names one input set: the problem's `get_inputs()` under a seed, then optionally a stress
transform of its floating-point tensors. Stress trials exist because `get_inputs()` is usually
N(0,1): a kernel that is right only there (a softplus clamped to |x|<=6) must fail. The judge uses a
stress trial only where the reference output stays finite; a problem narrows them with the literal
`INPUT_DOMAIN` ("any", the default; "positive": inputs must stay > 0; "unit_scale": only the shrinking
transform, for problems ill-conditioned at large inputs; "none": no stress trials).
"""

from __future__ import annotations

import math
import random
import types

import torch


from kbencheval.eval.seeds import STRESS_DOMAINS, stress_names  # noqa: F401  (which transforms a domain gets)

# name -> transform of one floating tensor (the domains each is valid for: seeds.STRESS_DOMAINS)
STRESS = {
    "x0.01": lambda x: x * 0.01,
    "x10": lambda x: x * 10.0,
    "x100": lambda x: x * 100.0,
    "shift+3": lambda x: x + 3.0,
    "shift-3": lambda x: x - 3.0,
}
assert STRESS.keys() == STRESS_DOMAINS.keys()


def load_problem_module(source: str, sizes: dict) -> types.ModuleType:
    module = types.ModuleType("reference_problem")
    exec(compile(source, "<reference problem>", "exec"), module.__dict__)
    for name, value in sizes.items():
        setattr(module, name, value)
    return module


def as_tensor_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def make_inputs(module, trial, device: torch.device) -> list:
    """`trial` is a protocol.Trial (or a bare seed for the problem's own inputs)."""
    seed, stress = (trial, "") if isinstance(trial, int) else (trial.seed, trial.stress)
    torch.manual_seed(seed)
    random.seed(seed)
    with torch.device(device):
        inputs = module.get_inputs()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    if stress:
        transform = STRESS[stress]
        inputs = [transform(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    return inputs


DIGEST_WIDTH = 4096


def output_digest(tensors: list, seed: int) -> list[float]:
    """One number per output tensor: its values projected on random ±1 weights (from `seed`), summed in
    float64. The worker sends these for every timed iteration inside the round; the judge recomputes
    them on the copy it is later sent, so that copy must be the very output of that timed iteration (a
    right answer computed after the round would have needed computing inside it). A matrix-vector
    product reads the output once, so this costs less than the copy the worker keeps anyway."""
    generator = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (DIGEST_WIDTH,), generator=generator).float() * 2 - 1
    digest = []
    for t in tensors:
        flat = t.detach().reshape(-1).float()
        w = signs.to(flat.device)
        rows = flat.numel() // DIGEST_WIDTH
        head = torch.mv(flat[: rows * DIGEST_WIDTH].view(rows, DIGEST_WIDTH), w).sum(dtype=torch.float64) \
            if rows else torch.zeros((), dtype=torch.float64, device=flat.device)
        tail = (flat[rows * DIGEST_WIDTH:] * w[: flat.numel() - rows * DIGEST_WIDTH]).sum(dtype=torch.float64)
        digest.append(float(head + tail))
    return digest


def digests_match(committed: list, recomputed: list[float]) -> bool:
    """Equal, up to the order a BLAS on the CPU may add in (on a GPU the same op gives the same bits);
    NaN matches NaN, so an output the reference also leaves NaN is no mismatch."""
    def same(c, r) -> bool:
        if not isinstance(c, (int, float)) or isinstance(c, bool):
            return False
        if math.isnan(c) or math.isnan(r):
            return math.isnan(c) and math.isnan(r)
        return c == r or abs(c - r) <= 1e-6 * max(abs(c), abs(r))
    return len(committed) == len(recomputed) and all(same(c, r) for c, r in zip(committed, recomputed))


def build_model(cls, module, seeds: dict, device: torch.device):
    torch.manual_seed(seeds["init"])
    with torch.device(device):
        init_inputs = module.get_init_inputs()
    torch.manual_seed(seeds["model"])
    with torch.device(device):
        model = cls(*init_inputs)
    return model.to(device)


def pin_global_flags() -> dict:
    """Fix the numerics-relevant torch flags; the worker checks after every call that they held."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    return global_flags()


def global_flags() -> dict:
    return {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "grad_enabled": torch.is_grad_enabled(),
    }


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu (Triton interpreter)"
    backend = f"ROCm {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}"
    return f"{device} ({torch.cuda.get_device_name(device)}, {backend})"
