"""A role stand-in the zygote checks fork (`zygote_check.py`): writes what it finds to the file
named in argv[1], then exits 3 (a distinct code, so the parent knows it ran to the end); with
`--raise` it raises instead (a fresh interpreter exits 1 with the traceback), with `--return` it
just ends (0)."""

from __future__ import annotations

import json
import os
import signal
import sys


def open_fds() -> list[int]:
    """Descriptors beyond the standard three (the one `listdir` used is closed again)."""
    out = []
    for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
        try:
            os.fstat(fd)
        except OSError:
            continue
        if fd > 2:
            out.append(fd)
    return out


fds = open_fds()
with open(sys.argv[1], "w") as out:
    json.dump({
        "ppid": os.getppid(),
        "parent_env": int(os.environ["SKULK_PARENT_PID"]),
        "argv": sys.argv[1:],
        "main": __name__,
        "preloaded": "skulk.services.base" in sys.modules,
        "mlx": "mlx" in sys.modules,
        "fds": fds,
        "deferred_blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                                   if s in (signal.SIGINT, signal.SIGHUP)),
    }, out)
if "--raise" in sys.argv:
    raise RuntimeError("the role failed")
if "--return" not in sys.argv:
    sys.exit(3)
