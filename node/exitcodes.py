"""The exit-code contract between every Skulk process and its supervisor (and launchd/systemd)."""

from __future__ import annotations

import signal

CLEAN = 0
"""Orderly stop (SIGTERM, admin stop)."""
CRASHED = 1
"""An unhandled error in a child's loop: restart it."""
BOOT_FAILURE = 3
"""A child could not start (bind failed, bad slice): restarted only after a back-off."""
WEDGED = 86
"""A runner overran its warmup deadline (a wedged GPU): never restarted; reboot the machine."""
GROUP_CONNECT_FAILED = 87
"""A runner could not form its mx.distributed ring in time: never restarted in a loop."""
ENGINE_REFUSED = 88
"""A runner's engine cannot run its checkpoint here (llama.cpp lacks the architecture or tensor
type, a damaged file, a context it cannot make): not restarted; the leader places the instance
again on another engine the checkpoint has, or gives it up with the reason."""
PEER_LOST = 89
"""A rank of a sharded instance stopped because a peer rank it works in lock-step with is gone:
not a cause of its own. The leader re-creates the instance as for any crash, and names the
peer's own failure as the cause once that is reported too."""
ESCALATED = 70
"""The root's restart budget was exhausted; everything was stopped (EX_SOFTWARE)."""
CONFIG_ERROR = 78
"""The configuration is invalid; nothing was started (EX_CONFIG)."""

_NAMES = {CLEAN: "clean", CRASHED: "crashed", BOOT_FAILURE: "boot failure",
          ESCALATED: "escalated", CONFIG_ERROR: "config error",
          WEDGED: "warmup deadline overrun, GPU may be wedged",
          GROUP_CONNECT_FAILED: "distributed group connect deadline overrun",
          ENGINE_REFUSED: "the engine cannot run this checkpoint",
          PEER_LOST: "a peer rank is gone"}
NEVER_RESTART = frozenset({WEDGED, GROUP_CONNECT_FAILED, ENGINE_REFUSED})


def describe(returncode: int) -> str:
    """A Popen return code in plain words: `signal 9 (SIGKILL)` or `exit code 3 (boot failure)`."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"signal {-returncode} ({name})"
    label = _NAMES.get(returncode)
    return f"exit code {returncode}" + (f" ({label})" if label else "")


def is_normal(returncode: int) -> bool:
    """OTP's `normal`/`shutdown`: a clean exit or one caused by our own SIGTERM."""
    return returncode in (CLEAN, -signal.SIGTERM, -signal.SIGINT)
