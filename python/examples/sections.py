"""The examples' sections: each runs under its own time limit (SIGALRM),
and one that fails to run is reported and the next one runs. Also torch,
triton and triton.language (`tl`) as the examples import them: None
where they are not importable (each example says what runs where).

Imported by the examples beside it (`python3 python/examples/<name>.py`
puts this folder on the import path)."""

import signal
import time

try:
    import torch
except ImportError:
    torch = None

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None


class Timeout(Exception):
    """A section ran past its limit."""


def section(title, seconds, fn):
    """Runs `fn()` under a limit of `seconds` (whole seconds), between a
    header and a footer with its time; returns its result, or None when it
    raised (the error is printed as an `ERROR <title>: ...` line)."""
    print(f"\n=== {title} (limit {seconds} s)", flush=True)

    def alarm(*_):
        raise Timeout(f"{title}: over {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    t0 = time.time()
    try:
        return fn()
    except Exception as e:  # a section that cannot run is reported, and the next one runs
        print(f"ERROR {title}: {type(e).__name__}: {e}", flush=True)
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        print(f"--- {title}: {time.time() - t0:.1f} s", flush=True)
