"""A role stand-in the zygote checks fork (`zygote_check.py`): writes what it finds to the file
named in argv[1], then exits 3 (a distinct code, so the parent knows it ran to the end)."""

from __future__ import annotations

import json
import os
import signal
import sys

with open(sys.argv[1], "w") as out:
    json.dump({
        "ppid": os.getppid(),
        "parent_env": int(os.environ["SKULK_PARENT_PID"]),
        "argv": sys.argv[1:],
        "main": __name__,
        "preloaded": "skulk.services.base" in sys.modules,
        "mlx": "mlx" in sys.modules,
        "deferred_blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                                   if s in (signal.SIGINT, signal.SIGHUP)),
    }, out)
sys.exit(3)
