"""Processes and their containment: the fork server (forkserver.py) and how the harness starts and talks to
it (server.py), a candidate worker's launch (launch.py), process groups and memory caps (lifecycle.py),
and the OS sandbox (sandbox/). forkserver.py also routes a forked child to the judge, a compile, or a
candidate worker, so that the untrusted worker never imports the judge.
"""
