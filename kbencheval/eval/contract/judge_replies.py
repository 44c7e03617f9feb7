"""The judge's typed replies to the harness's requests (protocol.Prepare, Compare, TimeReference, Release):
both ends are trusted, so a reply that does not fit its class is a bug, raised as ValueError."""

from __future__ import annotations

import dataclasses
import json

from kbencheval.eval.contract.protocol import Compare, Prepare, Release, TimeReference


@dataclasses.dataclass(kw_only=True)
class JudgeReply:
    """Any reply: `ok`, or the `error` that stopped the request; `reserved_bytes`: what the judge's
    allocator holds after it (None off CUDA), which the device gate counts as standing memory. A
    Release's reply."""

    ok: bool = True
    error: str = ""
    reserved_bytes: int | None = None


@dataclasses.dataclass(kw_only=True)
class Prepared(JudgeReply):
    """The reference's outputs for the trials: their sizes, and the trials whose output is not finite.
    On CUDA also what sizes a candidate's memory reservation (sizing.device_bytes_needed)."""

    device_name: str = ""
    output_bytes: list[int] = dataclasses.field(default_factory=list)  # one trial's outputs, each
    input_bytes: int = 0
    not_finite: list[str] = dataclasses.field(default_factory=list)  # Trial.key of each
    call_peak_bytes: int | None = None  # one reference call, inputs to outputs
    model_bytes: int = 0
    device_total_bytes: int | None = None


@dataclasses.dataclass(kw_only=True)
class TrialVerdict:
    trial: str  # Trial.key
    ok: bool
    message: str = ""
    stats: dict = dataclasses.field(default_factory=dict)  # the comparison's figures (compare.py)


@dataclasses.dataclass(kw_only=True)
class Compared(JudgeReply):
    """The items' verdicts in order, up to the first wrong one; or a protocol error that fails them all."""

    results: list[TrialVerdict] = dataclasses.field(default_factory=list)
    protocol_error: str = ""
    parts_s: dict = dataclasses.field(default_factory=dict)  # where the comparison's time went


@dataclasses.dataclass(kw_only=True)
class ReferenceTimed(JudgeReply):
    """A round's reference times (`ref_us`, one per trial); after `setup`, the timer's mechanisms, its
    input and output bytes and the reference graph's kernels; after `bandwidth`, the device's copy rate."""

    ref_us: list[float] = dataclasses.field(default_factory=list)
    mechanism: str = ""
    fresh_inputs: str = ""
    io_bytes: int = 0
    device_kernels: dict | None = None
    bandwidth_gbs: float | None = None
    parts_s: dict = dataclasses.field(default_factory=dict)


REPLIES = {Prepare: Prepared, Compare: Compared, TimeReference: ReferenceTimed, Release: JudgeReply}


def encode_reply(reply: JudgeReply) -> bytes:
    return (json.dumps(dataclasses.asdict(reply)) + "\n").encode()


def decode_reply(request, line: bytes | str) -> JudgeReply:
    """The judge's JSON line -> the reply class of `request` (the judge is trusted: a field it does not
    declare is a bug, raised as ValueError)."""
    d = json.loads(line)
    if "results" in d:
        d["results"] = [TrialVerdict(**r) for r in d["results"]]
    try:
        return REPLIES[type(request)](**d)
    except TypeError as e:
        raise ValueError(f"the judge's reply to {type(request).__name__} does not fit "
                         f"{REPLIES[type(request)].__name__}: {e}") from None
