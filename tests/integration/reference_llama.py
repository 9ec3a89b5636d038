"""llama.cpp's own greedy answers on a GGUF file, through the binding's single-sequence `Llama`
with llama.cpp's own defaults (flash attention as `llama-server` picks on a CPU).

Run as a subprocess: `python -m tests.integration.reference_llama FILE.gguf N '["prompt", ...]'`
[--raw]; prints a JSON list of {text, tokens: [[text, logprob, margin]...]} per prompt, where
`margin` is how far the chosen token's log-probability is above the runner-up's (a near-tie that
a different batch shape may break the other way). `--raw`: legacy completions of the prompts
as they are, no chat template. `--embed` (an embedding GGUF): llama.cpp's own unit vectors of the
texts, as a JSON list of lists.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from llama_cpp import Llama

CONTEXT = 512
"""Tokens of context: a prompt and its answer in the tests fit in a few hundred."""


def threads() -> int:
    """As many as a runner would have (the suite's `SKULK_RUNNER_THREADS`), else one per core."""
    return int(os.environ.get("SKULK_RUNNER_THREADS") or 0) or len(os.sched_getaffinity(0))


def main() -> None:
    path, n, prompts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    raw = "--raw" in sys.argv[4:]
    if "--embed" in sys.argv[4:]:
        embedder = Llama(model_path=path, embedding=True, n_threads=threads(), flash_attn=True, verbose=False)
        print(json.dumps(embedder.embed(prompts, normalize=True)))
        return
    llm = Llama(model_path=path, n_ctx=CONTEXT, n_threads=threads(), flash_attn=True, verbose=False,
                logits_all=True)
    print(json.dumps([one(llm, p, n, raw) for p in prompts]))


def one(llm: Llama, prompt: str, n: int, raw: bool) -> dict:  # type: ignore[type-arg]
    """The binding's own greedy answer; each token's log-probability and lead read from the logits
    llama.cpp computed for it (kept by `logits_all`). Not the binding's `logprobs=`: it takes the
    log-softmax of every context row and sorts the whole vocabulary in Python for each token
    (seconds per answer, most of the references' time)."""
    if raw:
        out = llm.create_completion(prompt, max_tokens=n, temperature=0.0)
        text = out["choices"][0]["text"]  # type: ignore[index]
    else:
        out = llm.create_chat_completion(messages=[{"role": "user", "content": prompt}], max_tokens=n,
                                         temperature=0.0)
        text = out["choices"][0]["message"]["content"]  # type: ignore[index]
    usage = out["usage"]  # type: ignore[index]
    first, count = usage["prompt_tokens"], usage["completion_tokens"]
    ids = [int(t) for t in llm.input_ids[:first]]
    tokens = []
    for row in llm.scores[first - 1:first - 1 + count]:  # the logits each answer token was chosen from
        logprobs = Llama.logits_to_logprobs(row)
        chosen = int(np.argmax(logprobs))  # greedy: llama.cpp's sampler takes the first highest logit too
        second = float(np.partition(logprobs, -2)[-2])
        piece = llm.detokenize([chosen], prev_tokens=ids).decode("utf-8", errors="ignore")
        tokens.append([piece, float(logprobs[chosen]), float(logprobs[chosen]) - second])
        ids.append(chosen)
    evaluated = [int(t) for t in llm.input_ids[first:llm.n_tokens]]  # (the last token is never evaluated)
    assert ids[first:first + len(evaluated)] == evaluated, "the answer is not the argmax of its logits"
    return {"text": text, "tokens": tokens}


if __name__ == "__main__":
    main()
