"""How the judge compares a candidate's outputs with the reference's: by dtype (integers exactly), NaN/Inf
where the reference has them, within a tolerance scaled by the output's RMS; fused kernels on a GPU
(judge_kernels.py), torch ops on the CPU and as their oracle. Trusted: runs only in the judge."""

from __future__ import annotations

import dataclasses
from collections import Counter

import torch

from kbencheval.eval.contract.errors import clip
from kbencheval.eval.contract.protocol import OutputItem, Trial
from kbencheval.eval.trusted import judge_kernels


def default_tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.float64) else 1e-2


@dataclasses.dataclass
class QueuedCheck:
    """One output's comparison: queued on the device (`numbers`, read back later together with others'),
    or already failed on its layout (`problem`)."""
    index: int
    problem: str = ""
    numbers: torch.Tensor | None = None  # floats: max abs diff, out of tolerance, NaN/Inf; else mismatches
    exact: bool = False  # integers and bools
    dtype: torch.dtype | None = None
    numel: int = 0
    atol: float = 0.0
    rtol: float = 0.0


def queue_compare(i: int, r: torch.Tensor, g: torch.Tensor, tol: dict, scale_atol: bool) -> QueuedCheck:
    """Checks `g`'s layout against `r`'s now and queues the comparison of their values on the device."""
    if tuple(r.shape) != tuple(g.shape):
        return QueuedCheck(i, problem=shape_mismatch(i, r, g))
    if r.dtype != g.dtype:
        return QueuedCheck(i, problem=f"output {i} has dtype {g.dtype}, expected {r.dtype}")
    if r.is_contiguous() and not g.is_contiguous():
        return QueuedCheck(i, problem=f"output {i} is not contiguous (the reference output is)")
    g = g.to(r.device)
    if not (r.is_floating_point() or r.is_complex()):
        return QueuedCheck(i, numbers=(r != g).sum().double().reshape(1), exact=True, dtype=r.dtype, numel=r.numel())
    atol = tol.get("atol", default_tolerance(r.dtype))
    rtol = tol.get("rtol", default_tolerance(r.dtype))
    if scale_atol:  # stress trials: the absolute tolerance follows the output's magnitude
        atol *= max(1.0, _finite_rms(r.reshape(-1)))
    return QueuedCheck(i, numbers=_compare_floats(r.reshape(-1), g.reshape(-1), atol, rtol), dtype=r.dtype,
                       numel=r.numel(), atol=atol, rtol=rtol)


def shape_mismatch(i: int, r: torch.Tensor, g: torch.Tensor) -> str:
    """What differs, told by the reference's numbers only: the candidate's own sizes would be a channel
    out of the sandbox (an empty tensor's shape can spell any bytes)."""
    if g.dim() != r.dim():
        return f"output {i} has {min(g.dim(), 99)} dimensions, expected {r.dim()}: shape {tuple(r.shape)}"
    wrong = [d for d in range(r.dim()) if g.shape[d] != r.shape[d]]
    return f"output {i} differs in size along dimension(s) {wrong[:8]}: expected shape {tuple(r.shape)}"


def verdict(check: QueuedCheck, numbers: list[float]) -> tuple[str, dict]:
    """'' when the check's `numbers`, read back, say its output matches: integers and bools exactly,
    floats within tolerance, NaN/Inf where the reference has them; else what is wrong. And its stats."""
    i = check.index
    if check.problem:
        return check.problem, {}
    if check.exact:
        n_bad = int(numbers[0])
        return (f"output {i} ({check.dtype}) differs in {n_bad / max(check.numel, 1):.1%} of {check.numel} elements "
                f"(integer outputs must be exact)" if n_bad else ""), {f"output{i}_mismatches": _rounded(n_bad)}
    max_diff, n_bad, n_special = numbers[0], int(numbers[1]), int(numbers[2])
    stats = {f"output{i}_max_abs_diff": _rounded(max_diff)}
    if n_special:
        return f"output {i} has {n_special} NaN/Inf values that differ from the reference's", stats
    if n_bad:
        return (f"output {i} mismatch: max abs diff {max_diff:.3g}, {n_bad / max(check.numel, 1):.1%} of "
                f"elements outside atol={check.atol:g} rtol={check.rtol:g}"), stats
    return "", stats


def _rounded(x: float) -> float:
    """Three significant digits: what a person reads, and no more bits of the candidate's values."""
    return float(f"{x:.3g}")


def compare_tensor(i: int, r: torch.Tensor, g: torch.Tensor, tol: dict, scale_atol: bool) -> tuple[str, dict]:
    """'' when `g` matches `r` (verdict), read back at once."""
    check = queue_compare(i, r, g, tol, scale_atol)
    return verdict(check, check.numbers.tolist() if check.numbers is not None else [])


class Readback:
    """Numbers queued on the device by several checks, read back together: one wait for the device
    instead of one per check. A wait is a turn among every process time-slicing the GPU: with several
    Evaluators, a judge's handful per timed output added up to seconds of each pass."""

    def __init__(self):
        self.parts: list[torch.Tensor] = []
        self.size = 0

    def add(self, numbers: torch.Tensor | None) -> slice:
        """Where `numbers` will be in `read()`'s list (an empty slice for None)."""
        if numbers is None:
            return slice(self.size, self.size)
        self.parts.append(numbers.reshape(-1).double())
        self.size += self.parts[-1].numel()
        return slice(self.size - self.parts[-1].numel(), self.size)

    def read(self) -> list[float]:
        if not self.parts:
            return []
        device = self.parts[0].device  # a reference output off the device would put its numbers elsewhere
        return torch.cat([p.to(device) for p in self.parts]).tolist()


def _finite_rms(r) -> float:
    """Root mean square of the finite elements (0 if none): one fused kernel on a GPU (judge_kernels)."""
    return judge_kernels.finite_rms_fused(r) if judge_kernels.usable(r) else finite_rms_torch(r)


def finite_rms_torch(r, chunk: int = 1 << 23) -> float:
    """_finite_rms in torch ops, in slices like compare_torch: the CPU path and the kernels' oracle."""
    total = torch.zeros((), dtype=torch.float64, device=r.device)
    count = torch.zeros((), dtype=torch.int64, device=r.device)
    for start in range(0, r.numel(), chunk):
        part = r[start:start + chunk].double()
        finite = torch.isfinite(part)
        total += torch.where(finite, part, 0.0).square().sum()
        count += finite.sum()
    total, count = total.item(), count.item()
    return (total / count) ** 0.5 if count else 0.0


def _compare_floats(r, g, atol, rtol) -> torch.Tensor:
    """(max abs diff, elements out of tolerance, NaN/Inf that differ), queued: one fused kernel on a GPU."""
    return judge_kernels.compare_queued(r, g, atol, rtol) if judge_kernels.usable(r, g) else \
        compare_torch_queued(r, g, atol, rtol)


def compare_torch(r, g, atol, rtol, chunk: int = 1 << 23) -> tuple[float, int, int]:
    """compare_torch_queued, read back: the CPU path and the kernels' oracle."""
    max_diff, n_bad, n_special = compare_torch_queued(r, g, atol, rtol, chunk).tolist()
    return max_diff, int(n_bad), int(n_special)


def compare_torch_queued(r, g, atol, rtol, chunk: int = 1 << 23) -> torch.Tensor:
    """float64 elementwise check in slices, so a multi-GB output needs no multi-GB temporaries. The
    counts stay on the device (a float64 vector): a read waits for the device's time slice among every
    process on it, so the caller reads once."""
    zero = lambda dtype: torch.zeros((), dtype=dtype, device=r.device)  # noqa: E731
    max_diff, n_bad, n_special = zero(torch.float64), zero(torch.int64), zero(torch.int64)
    for start in range(0, r.numel(), chunk):
        r64, g64 = r[start:start + chunk].double(), g[start:start + chunk].double()
        r_fin, g_fin = torch.isfinite(r64), torch.isfinite(g64)
        # NaN exactly where the reference has NaN, the same infinity where it has one.
        same_special = (torch.isnan(r64) & torch.isnan(g64)) | (torch.isinf(r64) & (r64 == g64))
        n_special += ((~r_fin | ~g_fin) & ~same_special).sum()
        both = r_fin & g_fin
        diff = torch.where(both, (r64 - g64).abs(), 0.0)
        n_bad += (both & ~(diff <= atol + rtol * r64.abs())).sum()
        if diff.numel():
            max_diff = torch.maximum(max_diff, diff.max())
    return torch.stack([max_diff, n_bad.double(), n_special.double()])


def queue_outputs(ref: list, got: list, tol: dict, scale_atol: bool = False) -> list[QueuedCheck]:
    """Each tensor output's check, queued, up to the first whose layout is wrong."""
    if len(ref) != len(got):
        return [QueuedCheck(-1, problem=f"expected {len(ref)} outputs, got {len(got) if len(got) <= 8 else 'more than 8'}")]
    checks = []
    for i, (r, g) in enumerate(zip(ref, got)):
        if isinstance(r, torch.Tensor):
            checks.append(queue_compare(i, r, g, tol, scale_atol))
            if checks[-1].problem:
                break
    return checks


def verdicts(checks: list[QueuedCheck], numbers: list[list[float]]) -> tuple[bool, str, dict]:
    """(ok, the first failed output's message, stats), outputs in order."""
    stats = {}
    for check, found in zip(checks, numbers, strict=True):
        message, found_stats = verdict(check, found)
        stats.update(found_stats)
        if message:
            return False, message, stats
    return True, "", stats


def compare(ref: list, got: list, tol: dict, scale_atol: bool = False) -> tuple[bool, str, dict]:
    """Candidate outputs against reference outputs; returns (ok, message, stats)."""
    checks = queue_outputs(ref, got, tol, scale_atol)
    readback = Readback()
    slots = [readback.add(check.numbers) for check in checks]
    numbers = readback.read()
    return verdicts(checks, [numbers[slot] for slot in slots])


def check_items(expected: list[Trial], items: list[OutputItem]) -> str:
    """'' when `items` hold exactly the `expected` trials, each once; else what is wrong."""
    got = Counter(item.trial for item in items)
    want = Counter(expected)
    if got == want:
        return ""
    missing = [t.key for t in want if got[t] < want[t]]
    extra = [t.key for t in got if got[t] > want[t]]
    return f"the worker returned other trials than requested (missing {clip(str(missing[:3]), 200)}, " \
        f"unexpected {clip(str(extra[:3]), 200)})"
