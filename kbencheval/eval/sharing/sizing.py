"""How much device memory a candidate reserves (gate.DeviceGate.reserve): its worker and its judge at
their peak, estimated from what the judge measured for the reference."""

from __future__ import annotations

from kbencheval.eval.config import EvalConfig
from kbencheval.eval.contract.protocol import judge_keeps_outputs
from kbencheval.eval.contract.judge_replies import Prepared
from kbencheval.eval.sharing.rounds import timed_outputs_per_request
from kbencheval.eval.contract.seeds import STRESS_NAMES

# Of the GPU's memory, what the candidates' reservations may add up to: the rest is for the CUDA
# contexts of idle judges (one per Evaluator) and the allocators' fragmentation.
DEVICE_MEMORY_FRACTION = 0.9
CUDA_CONTEXT_BYTES = 1 << 30  # per process: the CUDA context and cuBLAS's workspace, with room to spare
COMPARE_SLICES_BYTES = 1 << 28  # judge.compare's float64 temporaries for one 8M-element slice of an output


def device_bytes_needed(prep: Prepared, cfg: EvalConfig, copies_inputs: bool = False) -> int:
    """A candidate's device memory at its peak, worker and judge together, from what the judge measured
    for the reference (`call_peak_bytes`: one call's inputs, intermediates and outputs; the model's
    weights). Each side holds its model, a call's peak in its timer (its inputs regenerated in place;
    where the problem's timers are known to copy fresh inputs instead, a second input set:
    `copies_inputs`, learnt from the judge's timer, fresh_inputs.FreshInputs) and an L2 flush buffer; the
    worker also a trial's exported outputs until the judge has read them (timed outputs are recomputed
    into the timer's own buffers, and all but the last of a request's copied out); the judge also its
    cached reference outputs, its snapshot of a timed output and the comparison's float64 slices. An
    estimate: a candidate that uses more than its reference can still run out, and is then re-run with
    the device to itself (`device_oom_retry`)."""
    outputs, inputs = sum(prep.output_bytes), prep.input_bytes
    call = prep.call_peak_bytes if prep.call_peak_bytes is not None else inputs + outputs
    per_side = CUDA_CONTEXT_BYTES + prep.model_bytes + call + cfg.l2_flush_mb * 2**20 + copies_inputs * inputs
    # The worker's outputs waiting for the judge: a trial's, or the copies of a request's picked timed outputs.
    exported = max(outputs, (timed_outputs_per_request(outputs) - 1) * outputs)
    cache = int(cfg.judge_cache_gb * 2**30)
    cached = min(cache, (cfg.trials + len(STRESS_NAMES)) * outputs) if judge_keeps_outputs(outputs, cache) else 0
    judge = cached + outputs + min(4 * outputs, COMPARE_SLICES_BYTES)
    return int(2 * per_side + exported + judge)
