"""Which children a failure affects, and whether a child is restarted at all (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from skulk.node import exitcodes
from skulk.node.exitcodes import is_normal
from skulk.supervisor.spec import Restart, Strategy


def affected(strategy: Strategy, ordered_ids: Sequence[str], failed_id: str) -> list[str]:
    """The children to restart, in start order, when `failed_id` fails.

    one_for_one and simple_one_for_one: only the failed child. one_for_all: every child.
    rest_for_one: the failed child and every child started after it.
    """
    if failed_id not in ordered_ids:
        raise ValueError(f"{failed_id!r} is not a child")
    if strategy in ("one_for_one", "simple_one_for_one"):
        return [failed_id]
    if strategy == "one_for_all":
        return list(ordered_ids)
    if strategy == "rest_for_one":
        return list(ordered_ids[ordered_ids.index(failed_id):])
    raise ValueError(f"unknown strategy {strategy!r}")


def should_restart(restart: Restart, returncode: int) -> bool:
    """permanent: always; transient: only after an abnormal exit; temporary: never.
    A wedge or a failed group connect is never restarted (it would only wedge again)."""
    if returncode in exitcodes.NEVER_RESTART:
        return False
    if restart == "permanent":
        return True
    if restart == "transient":
        return not is_normal(returncode)
    return False
