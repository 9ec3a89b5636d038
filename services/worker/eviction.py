"""Which staged copies to delete (pure): one mechanism for all three triggers (an
instance's deactivation, node start-up, `POST /store/purge-staging`).

A copy is a candidate only when no live runner of this node uses it and it is no in-use
model's companion. Deactivation and start-up keep the candidates newest-used first up to the
grace budget (`staging_keep_recent_gb`; 0 = strict evict-on-deactivate) and delete the rest;
a purge deletes every candidate (or the one model it names), whatever the budget.
"""

from __future__ import annotations

from collections.abc import Iterable

from skulk.node.staged import Staged


def doomed(staged: Iterable[Staged], in_use: set[str], keep_bytes: int,
           purge: bool = False, only: str = "") -> list[str]:
    """The model ids to delete: candidates beyond the budget (or, for a purge, every candidate;
    `only` narrows either to one model)."""
    candidates = sorted((s for s in staged if s.model_id not in in_use and (not only or s.model_id == only)),
                        key=lambda s: (-s.last_used, s.model_id))
    out, kept = [], 0
    for s in candidates:
        if not purge and kept + s.size_bytes <= keep_bytes:
            kept += s.size_bytes
            continue
        out.append(s.model_id)
    return out
