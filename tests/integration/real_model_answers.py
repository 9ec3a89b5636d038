"""What the real-model tests ask and compare (`test_real_model.py`): the greedy request each
prompt makes, the plain node's answers kept once per file (single-stream decode of the fp32
model is the file's cost), and the identity check the speculating nodes must pass against
them."""

from __future__ import annotations

import json
from typing import Any

from tests.integration import batch_clients as bc
from tests.integration.real_model import PROMPTS, REAL

N = 24
"""Tokens per greedy answer."""
LOGPROB_TOL = 2e-3
"""How far a token's log-probability may differ between the node's fp32 computation and mlx-lm's."""


def ask(prompt: str) -> dict[str, Any]:
    return {**bc.body(prompt, N), "model": REAL}


COPY = ("Repeat this list exactly, one item per line, and nothing else: apples, oranges, pears, plums, "
        "cherries, grapes, lemons, limes, figs, dates, melons, peaches.")


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
          "required": ["city", "country"], "additionalProperties": False}
SCHEMA_ASK = {**ask("What is the capital of France? Answer in JSON with the city and the country."), "max_tokens": 60,
              "response_format": {"type": "json_schema", "json_schema": {"name": "capital", "schema": SCHEMA}}}


_PLAIN: dict[tuple[int, str], dict[str, Any]] = {}


def plain_answer(plain, body: dict[str, Any]) -> dict[str, Any]:
    """The plain node's greedy answer to `body`, asked once per file (greedy answers repeat:
    the speculation tests compare against the same few, and single-stream decode is the file's
    cost)."""
    key = (plain.api_port, json.dumps(body, sort_keys=True))
    if key not in _PLAIN:
        status, reply = bc.complete(plain.url, body)
        assert status == 200, reply
        _PLAIN[key] = reply
    return _PLAIN[key]


SPECULATED = (0, 3, 6)  # of PROMPTS (the plain node answers all 8): decode is this file's cost


def same_as_plain(node, plain, reference) -> tuple[int, int, dict[str, Any]]:
    """Every greedy answer of `node` is the plain node's, token for token: alone (SPECULATED and a
    copying answer, where drafts are kept), two at once (the batch leaves speculation and comes
    back), with `max_tokens`, a stop string and a JSON schema. The drafts kept and thrown, in all,
    and the node's reply to the copying request."""
    kept = thrown = 0

    def counted(reply):
        nonlocal kept, thrown
        details = reply["usage"]["completion_tokens_details"]
        kept, thrown = kept + details["accepted_prediction_tokens"], thrown + details["rejected_prediction_tokens"]
        return reply

    for prompt, ref in ((PROMPTS[i], reference[i]) for i in SPECULATED):
        status, reply = bc.complete(node.url, ask(prompt))
        assert status == 200 and counted(reply)["choices"][0]["message"]["content"] == ref["text"], (prompt, reply)
        want = [(tuple(t[0]), t[1]) for t in ref["tokens"]]
        assert bc.compare(want, bc.tokens_of(reply), LOGPROB_TOL) == "", prompt
    copy = {**ask(COPY), "max_tokens": 60}
    schema = SCHEMA_ASK
    replies = []
    for body in (copy, {**copy, "max_tokens": 9}, {**copy, "stop": ["plums"]}, schema):
        want, got = plain_answer(plain, body), counted(bc.complete(node.url, body)[1])
        replies.append(got)
        for key in ("finish_reason", "message"):
            assert want["choices"][0][key] == got["choices"][0][key], (body, want, got)
        assert want["usage"]["completion_tokens"] == got["usage"]["completion_tokens"], body
        assert bc.compare(bc.tokens_of(want), bc.tokens_of(got), LOGPROB_TOL) == "", body
    together = bc.all_at_once(node.url, [copy, ask(PROMPTS[1])])
    want_copy = plain_answer(plain, copy)["choices"][0]["message"]["content"]
    assert [r["choices"][0]["message"]["content"] for _, r in together] == [want_copy, reference[1]["text"]]
    return kept, thrown, replies[0]
