"""A drafter model for speculative decoding: a smaller model (or the model itself, the
mechanism's upper bound) that proposes the next k tokens greedily from its own KV cache.

Its cache follows the stream it drafts for: each proposal keeps the longest prefix its cache
shares with the stream's tokens, trims the rest (rejected drafts, another request) and feeds
what is new, so a stream pays a drafter prefill only when it starts speculating. `mlx` is
imported inside the methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

PREFILL_CHUNK = 512


class Drafter:
    def __init__(self, model: Any) -> None:
        self.model = model
        self._fresh()

    def _fresh(self) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        self.cache = make_prompt_cache(self.model)
        self.seen: list[int] = []  # the tokens in `cache`, in order

    def _keep(self, n: int) -> None:
        """Keep the first `n` cached tokens (a cache that cannot trim starts over)."""
        drop = len(self.seen) - n
        if drop <= 0:
            return
        if not all(c.is_trimmable() for c in self.cache) or \
                any(c.trim(drop) != drop for c in self.cache):
            self._fresh()
            return
        del self.seen[n:]

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        """Up to `k` drafts after `context`; [] while the drafter is still catching up with a long
        new context (one `PREFILL_CHUNK` per call, so a step stays bounded: the plain step runs)."""
        import mlx.core as mx

        common, limit = 0, min(len(self.seen), len(context) - 1)  # the last token is always fed
        while common < limit and self.seen[common] == context[common]:
            common += 1
        self._keep(common)
        feed, drafts = list(context[len(self.seen):]), []
        if len(feed) > PREFILL_CHUNK:
            head = feed[:PREFILL_CHUNK]
            self.model(mx.array([head]), cache=self.cache)
            mx.eval([c.state for c in self.cache])
            self.seen.extend(head)
            return []
        for _ in range(k):
            logits = self.model(mx.array([feed]), cache=self.cache)[0, -1]
            token = int(cast(int, mx.argmax(logits).item()))  # argmax is integral; mlx types item() as any scalar
            self.seen.extend(feed)
            drafts.append(token)
            feed = [token]
        return drafts  # the cache holds the context and every draft but the last


def locate(model_dir: Any, asked: str) -> tuple[Any, str]:
    """(the drafter's directory, "") or (None, why not): `asked` (config), else the one the
    model's `skulk.json` names (`runtime.assistant_model_repo`, upstream's key), staged beside it."""
    import json

    from skulk.wire.models import ModelDirError, dir_name

    drafter = asked
    if not drafter:
        try:
            extra = json.loads((model_dir / "skulk.json").read_text())
            runtime = (extra.get("runtime") or {}) if isinstance(extra, dict) else {}
            drafter = str(runtime.get("assistant_model_repo") or "")
        except (OSError, ValueError):
            drafter = ""
    if not drafter:
        return None, "off: drafter mode, but no drafter is named (speculative.drafter, or the card's " \
                     "runtime.assistant_model_repo)"
    try:
        where = model_dir.parent / dir_name(drafter)
    except ModelDirError as exc:
        return None, f"off: drafter {drafter!r}: {exc}"
    if not (where / "config.json").is_file():
        return None, f"off: drafter {drafter} is not staged beside the model ({where})"
    return where, ""
