"""The sandbox probe runs in a fresh PID namespace and is waited for by the namespace helper, its parent:
a probe that ends at once must not read as a missing pid-ns layer (the fork server used to look up the
intermediate process in /proc after the helper's reply, and on a loaded machine it could be gone by
then), and a probe that never ends is cut at its limit with that reason."""

import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import os, sys, time
    from kbencheval.eval.processes.sandbox.namespaces import ServerSandbox

    def quick(payload):
        with open(payload["marker"], "w") as f:
            f.write(str(os.getpid()))

    def endless(payload):
        time.sleep(60)

    server = ServerSandbox({"mode": "full"})
    server.start_helper({"quick": quick, "endless": endless})
    for _ in range(20):  # each ends before its reply is read: the old lookup of the intermediate raced this
        os.unlink(sys.argv[1]) if os.path.exists(sys.argv[1]) else None
        server.run_to_end("quick", {"marker": sys.argv[1]}, timeout_s=30)
        print("pid in its namespace:", open(sys.argv[1]).read())
    t0 = time.monotonic()
    try:
        server.run_to_end("endless", {}, timeout_s=0.5)
    except OSError as e:
        print("cut:", e.strerror, round(time.monotonic() - t0, 1))
""")


def test_a_quick_probe_is_waited_for_and_an_endless_one_is_cut(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ran")], capture_output=True, text=True,
                          timeout=120)
    if "Operation not permitted" in done.stderr:
        pytest.skip("no PID namespaces here (unshare refused)")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:20] == ["pid in its namespace: 1"] * 20  # each ran, to its end, as PID 1 of its own namespace
    assert lines[20].startswith("cut: the run did not finish within 0.5 s")
    assert float(lines[20].rsplit(" ", 1)[1]) < 10
