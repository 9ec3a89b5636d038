"""A llama.cpp runner's answers against llama.cpp's own on the same GGUF file (the binding's
single-sequence `Llama`, in a subprocess: `reference_llama.py`).

llama.cpp's CPU kernels are not batch-invariant, so an answer equals llama.cpp's token for token,
each log-probability within `tolerance` of llama.cpp's, up to the first place, if any, where
llama.cpp's own two best tokens are within `tolerance` of each other (a tie the batch's shape may
break either way). The tolerance is `TIE` plus twice what llama.cpp's own answers move on this CPU
when the prompts share its cache (the reference's `noise`, 0 on many CPUs): the engine's cache
holds more beside a row (other rows, cached prefixes) than the reference's batch did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.patience import patience

N = 24
TIE = 0.3


def llama_reference(model_dir: Path, prompts: list[str], n: int, raw: bool = False) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "tests.integration.reference_llama", str(model_dir / "model.gguf"),
                          str(n), json.dumps(prompts), *(["--raw"] if raw else [])],
                         capture_output=True, text=True, timeout=patience(100), check=True)
    return json.loads(out.stdout)


def tolerance(ref: dict[str, Any]) -> float:
    """How far a log-probability may be from llama.cpp's own, and the lead under which llama.cpp's
    choice is a near-tie, on this CPU."""
    return TIE + 2 * ref.get("noise", 0.0)


def disagreement(text: str, ref: dict[str, Any], reply: dict[str, Any] | None = None) -> str:
    """"" when `text` is llama.cpp's answer, or differs from it only after a near-tie (and, given
    the reply with its logprobs, each token's log-probability is within `tolerance` of llama.cpp's)."""
    tie = tolerance(ref)
    if reply is not None:
        for k, (step, (piece, logprob, _margin)) in enumerate(zip(reply["choices"][0]["logprobs"]["content"],
                                                                   ref["tokens"])):
            if step["token"] != piece:
                break
            if abs(step["logprob"] - logprob) > tie:
                return f"token {k} {piece!r}: logprob {step['logprob']:.3f}, llama.cpp's {logprob:.3f} (by {tie:.2f})"
    if text == ref["text"]:
        return ""
    at = next((i for i, (a, b) in enumerate(zip(text, ref["text"])) if a != b), min(len(text), len(ref["text"])))
    seen = 0
    for k, (piece, _logprob, margin) in enumerate(ref["tokens"]):
        start, seen = seen, seen + len(piece)
        if seen > at:
            # Parting right where token k starts, the answer may have taken a longer token than
            # token k - 1 (' amazing' where llama.cpp's is ' a'): the choice made there counts too.
            before = ref["tokens"][k - 1][2] if start == at and k > 0 else float("inf")
            if min(margin, before) < tie:
                return ""
            return (f"differs at character {at} (reference token {k} {piece!r}, its lead {margin:.3f} nats): "
                    f"{text!r} vs {ref['text']!r}")
    return f"{text!r} vs {ref['text']!r}"


def first_tie(ref: dict[str, Any]) -> int:
    """The first token where llama.cpp's own two best are within `tolerance` (len: none): the
    answer is compared up to there, so a test on a random-weight model asserts it comes late enough."""
    tie = tolerance(ref)
    return next((k for k, (_piece, _logprob, margin) in enumerate(ref["tokens"]) if margin < tie), len(ref["tokens"]))
