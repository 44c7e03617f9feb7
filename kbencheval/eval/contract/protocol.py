"""The typed contract between the trusted harness/judge and the untrusted candidate worker.

Both sides of the trust line import it, with the rest of contract/ (`inputs` turns a trial into
tensors; the judge's replies, which only the trusted side reads, are in `judge_replies`). It imports
no torch, so the harness stays light. Everything crossing a socket is one
JSON object per line; `decode` turns a line into one of the dataclasses below or raises
`ProtocolError`, which the harness turns into `rejected`: a worker that sends anything but the reply
to what it was asked is abusing the protocol.

The conversation (the harness drives; the worker only answers):

    harness -> Assign(job)                      to a worker forked before its candidate was known
    worker -> Ready | Failure                   after importing and constructing ModelNew
    harness -> RunPhase(phase, trials, ...)     the trials' seeds are drawn at run time and sent only now
    worker -> Outputs(phase, items) | Failure   exactly one item per requested trial
    ...                                         (the harness asks the judge, then asks for the next phase)

Inside a phase, before Triton compiles a kernel (CPU work, seconds), the worker waits for its earlier
GPU work and says `Compiling`; after the compile it says `Compiled` and launches nothing until the
harness says `Resume`. Meanwhile the harness may let go of the device gate, so timers elsewhere do not
wait for a compile. Only scheduling depends on these messages, never a verdict.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class Status(str, enum.Enum):
    """Outcome of one evaluation, worst first. `rejected` means the candidate broke the rules."""

    FORMAT_ERROR = "format_error"  # no code block / no ModelNew
    REJECTED = "rejected"  # cheating, forbidden constructs or protocol abuse; always the lowest reward
    COMPILE_ERROR = "compile_error"  # import, construction or kernel compilation failed
    RUNTIME_ERROR = "runtime_error"  # crashed while running (incl. segfault, OOM)
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    CORRECT = "correct"


class ProtocolError(ValueError):
    """A message that is malformed or not the one expected at this point of the conversation."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trial:
    """One input set: the problem's get_inputs() under `seed`, optionally stressed (see inputs.STRESS)."""

    seed: int
    stress: str = ""

    @property
    def key(self) -> str:
        return f"{self.seed}/{self.stress or 'base'}"


@dataclasses.dataclass(kw_only=True)
class TimingSpec:
    enabled: bool = False
    mode: str = "trusted"  # trusted | events | cuda_graph (the last two: eager, inside the worker)
    warmup: int = 10
    iters: int = 100  # trusted mode: the most timed iterations per model; events / cuda_graph: exactly these
    min_iters: int = 100  # trusted mode: stop after these once the speedup is known to `target_rse`
    target_rse: float = 0.0
    l2_flush_bytes: int = 256 << 20
    baseline: str = "eager"
    input_budget_bytes: int = 6 << 30
    outputs_per_request: int = 1  # picked timed outputs per `timed_outputs` request (rounds.timed_outputs_per_request)


@dataclasses.dataclass(kw_only=True)
class CandidateJob:
    """What the fork server hands a fresh worker. Holds no seed of any trial: those come per phase."""

    job_dir: str
    device: str
    problem_source: str
    sizes: dict
    model_seeds: dict  # {"init": int, "model": int}: ModelNew gets the reference's weights
    candidate_file: str
    allowed_ops: list[str]
    backend: str = "triton"  # what the candidate was asked to write (judges whose kernels are its own)
    poison_bytes: list[int]
    memory_limit_bytes: int = 0
    socket: str = ""
    timing: TimingSpec = dataclasses.field(default_factory=TimingSpec)
    kind: str = "candidate"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CandidateJob":
        d = dict(d)
        d["timing"] = TimingSpec(**d.get("timing", {}))
        return cls(**d)


def judge_keeps_outputs(output_bytes: int, cache_bytes: int) -> bool:
    """Whether the judge caches a problem's reference outputs between prepare and compare: only where
    four trials' outputs fit its cache. Larger ones are recomputed for each comparison (recomputing
    an elementwise output is cheap), instead of holding a gigabyte for the
    candidate's whole memory reservation. The harness sizes that reservation by the same rule."""
    return 0 < 4 * output_bytes <= cache_bytes


@dataclasses.dataclass(kw_only=True)
class JudgeJob:
    job_dir: str
    device: str
    socket: str = ""
    memory_limit_bytes: int = 0
    cache_bytes: int = 8 << 30  # reference outputs kept per problem (EvalConfig.judge_cache_gb)
    kind: str = "judge"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --- worker <-> harness messages ---------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class Assign:
    """Harness -> worker, once: its candidate. The worker was forked, set up its device and locked itself
    down before the candidate was known (kbencheval/eval/processes/launch.py); nothing of the candidate ran yet."""

    job: dict  # CandidateJob.to_dict()
    type: str = "assign"


@dataclasses.dataclass(kw_only=True)
class Ready:
    """The candidate was imported and its kernels compiled; ModelNew is built on the device at the first
    request, once the memory reservation was admitted. `checks`: the worker's own findings (tripwires)."""

    checks: dict = dataclasses.field(default_factory=dict)
    type: str = "ready"


@dataclasses.dataclass(kw_only=True)
class Failure:
    """The worker's own finding that the candidate failed; it can only ever lower a verdict."""

    status: Status
    error: str
    trial: str = ""
    checks: dict = dataclasses.field(default_factory=dict)
    type: str = "failure"


@dataclasses.dataclass(kw_only=True)
class OutputItem:
    trial: Trial
    desc: dict  # transfer descriptor (kbencheval.eval.contract.transfer)


@dataclasses.dataclass(kw_only=True)
class Outputs:
    phase: str
    items: list[OutputItem]
    checks: dict = dataclasses.field(default_factory=dict)
    timing: dict | None = None  # worker-measured times, timer mechanism, device kernels (judged by the harness)
    type: str = "outputs"


@dataclasses.dataclass(kw_only=True)
class RunPhase:
    """Harness -> worker: run `trials` (correctness) or time on `timing_trials` then run `trials`."""

    phase: str
    trials: list[Trial]
    timing_trials: list[Trial] = dataclasses.field(default_factory=list)
    spot_checks: list[int] = dataclasses.field(default_factory=list)
    digest_seed: int = 1  # time_round: the weights of the outputs' digests the worker commits to
    type: str = "run_phase"


@dataclasses.dataclass(kw_only=True)
class Compiling:
    """The worker's device work so far is done, and it compiles a kernel on the CPU now."""

    type: str = "compiling"


@dataclasses.dataclass(kw_only=True)
class Compiled:
    """The compile is over; the worker launches nothing until it is told to `Resume`."""

    type: str = "compiled"


@dataclasses.dataclass(kw_only=True)
class Resume:
    """Harness -> worker, after `Compiled`: the device is the worker's to use again."""

    type: str = "resume"


# --- harness -> judge requests (both trusted; each has its typed reply in judge_replies.py) ----------


@dataclasses.dataclass(kw_only=True)
class Prepare:
    """Build the reference and its outputs for `trials`; the reply lists trials whose output is not finite."""

    problem_source: str
    sizes: dict
    model_seeds: dict
    trials: list[Trial]
    type: str = "prepare"


@dataclasses.dataclass(kw_only=True)
class Compare:
    """Judge `items` against the reference; they must be exactly `expected`, each once."""

    job_dir: str
    phase: str
    tolerance: dict
    expected: list[Trial]
    items: list[OutputItem]
    # Timed outputs, one per expected item, in its order: the digest the worker sent in the item's round ...
    committed: list[list] | None = None
    digest_seeds: list[int] | None = None  # ... and the seed of its weights (inputs.output_digest)
    # False while more of the same candidate's outputs follow: the judge keeps its allocator's free blocks
    # for them, inside the candidate's memory reservation, instead of freeing and allocating them again.
    trim: bool = True
    type: str = "compare"


@dataclasses.dataclass(kw_only=True)
class TimeReference:
    """Time the reference on `trials` (one fresh input set per iteration); `setup` builds the timer;
    `bandwidth` asks for the device's copy bandwidth (measured once per judge, with the device held)."""

    spec: TimingSpec
    trials: list[Trial]
    setup: bool = False
    bandwidth: bool = False
    type: str = "time_reference"


@dataclasses.dataclass(kw_only=True)
class Release:
    """Drop the problem's timer and cached reference outputs (after a large candidate). With
    `keep_problem`, only give the allocator's free blocks back (a candidate ended before its last
    comparison, which would have)."""

    keep_problem: bool = False
    type: str = "release"


_MESSAGES = {cls.__dataclass_fields__["type"].default: cls
             for cls in (Assign, Ready, Failure, Outputs, RunPhase, Compiling, Compiled, Resume, Prepare, Compare,
                         TimeReference, Release)}


def encode(msg) -> bytes:
    d = dataclasses.asdict(msg)
    return (json.dumps(d, default=lambda o: o.value if isinstance(o, enum.Enum) else str(o)) + "\n").encode()


def decode(line: bytes | str) -> Any:
    """One JSON line -> a message dataclass; anything malformed raises ProtocolError."""
    try:
        d = json.loads(line)
        cls = _MESSAGES[d["type"]]
        if cls is Failure:
            d["status"] = Status(d["status"])
            if d["status"] == Status.CORRECT:
                raise ProtocolError("a worker cannot report success")
        if cls in (Outputs, Compare):
            d["items"] = [OutputItem(trial=Trial(**i["trial"]), desc=dict(i["desc"])) for i in d["items"]]
        if cls is TimeReference:
            d["spec"] = TimingSpec(**d["spec"])
        for field in ("trials", "timing_trials", "expected"):
            if field in d and field in cls.__dataclass_fields__:
                d[field] = [Trial(**t) for t in d[field]]
        return cls(**d)
    except ProtocolError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ProtocolError(f"malformed message ({type(e).__name__}: {str(e)[:120]})") from None


class Channel:
    """Typed messages, one JSON line each, over a connected socket (the worker's side)."""

    def __init__(self, sock):
        self.sock = sock
        self.rfile = sock.makefile("rb")

    def send(self, msg) -> None:
        self.sock.sendall(encode(msg))

    def recv(self):
        line = self.rfile.readline()
        if not line:
            raise EOFError("harness closed the channel")
        return decode(line)
