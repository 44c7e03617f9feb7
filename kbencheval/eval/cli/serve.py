"""`kbench serve-eval`: keep one Evaluator warm and serve `kbench check` on a Unix domain socket.

    kbench serve-eval --device cuda:0                      # socket: $XDG_RUNTIME_DIR/kbench/eval-cuda0.sock
    kbench serve-eval --device cpu --socket /tmp/k.sock trials=2   # any EvalConfig key=value
    kbench check --ref p.py --kernel k.py --device cuda:0  # served when a server answers with the same config

Runs until SIGINT or SIGTERM, then refuses what is queued, closes the Evaluator (fork server, judge)
and removes the socket. Exit status 0 after a signal; 2 with one line for bad arguments or a socket in
use or a device torch cannot use; 3 when the harness cannot start. docs/evaluator.md, "A warm evaluator".
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from kbencheval.config import ConfigError, apply_overrides
from kbencheval.eval.config import EvalConfig
from kbencheval.eval.cli.service import EvalService, ServiceUnavailable, Stopped, check_socket_free, default_socket_path, \
    private_dir


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbench serve-eval", description="Serve one warm Evaluator to kbench check.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog="example: kbench serve-eval --device cuda:0 trials=3  (any EvalConfig "
                                       "key=value; kbench check matches them to use it; `kbench run-one --help` "
                                       "lists them)")
    p.add_argument("--device", metavar="STR", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--socket", metavar="PATH", default=None,
                   help="socket path; default: per user and device in a private folder (0700), "
                        "$XDG_RUNTIME_DIR/kbench/ or /tmp/kbench-<uid>/")
    p.add_argument("overrides", nargs="*", help="EvalConfig key=value overrides")
    return p


class _Signals:
    """SIGINT/SIGTERM, once (a second must not interrupt the cleanup the first started). While the Evaluator
    starts, a signal is only noted, so the start completes and is closed cleanly (no half-built Evaluator
    with its scratch folder left behind); once serving, it raises Stopped in the main thread."""

    def __init__(self):
        self.requested, self.serving = False, False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.requested = True
        if self.serving:
            raise Stopped

    def serve(self) -> None:
        """From now on a signal raises Stopped; one that came during the start raises it at once."""
        self.serving = True
        if self.requested:
            raise Stopped


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = apply_overrides(EvalConfig(device=args.device), args.overrides)
        path = Path(args.socket) if args.socket else default_socket_path(cfg.device)
        if not args.socket:
            private_dir(path.parent, create=True)
        check_socket_free(path)  # fail before the long Evaluator start
    except (ConfigError, ServiceUnavailable, ValueError, OSError) as e:
        print(f"kbench serve-eval: {e}", file=sys.stderr)
        return 2
    from kbencheval.eval.trusted.harness import Evaluator, HarnessError

    t0 = time.monotonic()
    ev = service = None
    signals = _Signals()
    try:
        ev = Evaluator(cfg)
        service = EvalService(ev, path)
        signals.serve()
        print(f"kbench serve-eval: serving {cfg.device_index} at {path} (evaluator started in "
              f"{time.monotonic() - t0:.1f} s); stop with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
        service.run()  # returns after a signal, cleaned up
    except Stopped:  # the signal came during the start, or before run() was inside its own handler
        service.close()
    except HarnessError as e:
        print(f"kbench serve-eval: the harness could not run: {e}", file=sys.stderr)
        return 3
    except ConfigError as e:  # a device torch cannot use, found before any process started
        print(f"kbench serve-eval: {e}", file=sys.stderr)
        return 2
    except (ServiceUnavailable, OSError) as e:
        if ev:
            ev.close()
        print(f"kbench serve-eval: {e}", file=sys.stderr)
        return 2
    print(f"kbench serve-eval: stopped after {service.served} evaluations; removed {path}", file=sys.stderr)
    return 0
