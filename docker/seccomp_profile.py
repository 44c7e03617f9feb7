"""Docker's default seccomp profile plus exactly the syscalls the evaluator's sandbox needs.

    docker version --format '{{.Server.Version}}'          # e.g. 28.5.2: take that version's default profile
    curl -fsSLo default.json https://raw.githubusercontent.com/moby/moby/v28.5.2/profiles/seccomp/default.json
    python docker/seccomp_profile.py default.json > seccomp-sandbox.json
    docker run --gpus all --security-opt seccomp=seccomp-sandbox.json --security-opt apparmor=unconfined \\
        --security-opt systempaths=unconfined tritonforge:cuda kbench check --level 1 --problem-id 1 --kernel k.py

Docker's default refuses unshare, setns and the mount calls to a container without CAP_SYS_ADMIN, so the
sandbox's user, PID, mount and network namespaces are lost there and evaluation refuses to start
(kbencheval/eval/processes/sandbox/minimum.py). This adds one rule allowing whichever of the sandbox's syscalls the
given profile does not allow outright; everything else stays Docker's. The sandbox makes its namespaces
inside its own user namespace, so the container gains no privilege over the host. `apparmor=unconfined`:
Docker's AppArmor profile denies mount (hosts without AppArmor ignore it); `systempaths=unconfined`: a
fresh /proc can be mounted only where none of /proc is masked (without it, `private-proc` alone is lost).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kbencheval.eval.processes.sandbox.minimum import SANDBOX_SYSCALLS  # noqa: E402


def allowed_outright(profile: dict) -> set[str]:
    """Names an ALLOW rule admits with no argument, capability or architecture condition."""
    return {name for rule in profile.get("syscalls", []) if rule.get("action") == "SCMP_ACT_ALLOW"
            and not rule.get("args") and not rule.get("includes") and not rule.get("excludes")
            for name in rule.get("names", [])}


def with_sandbox(profile: dict) -> dict:
    extra = [name for name in SANDBOX_SYSCALLS if name not in allowed_outright(profile)]
    if not extra:
        return profile
    rule = {"names": extra, "action": "SCMP_ACT_ALLOW",
            "comment": "kbencheval's sandbox: its own user, PID, mount and network namespaces, Landlock, seccomp"}
    return {**profile, "syscalls": [*profile.get("syscalls", []), rule]}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    print(json.dumps(with_sandbox(json.loads(Path(argv[0]).read_text())), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
