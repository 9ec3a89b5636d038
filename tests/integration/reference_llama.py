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

from llama_cpp import Llama

CONTEXT = 512
"""Tokens of context: a prompt and its answer in the tests fit in a few hundred. The binding keeps
a float per vocabulary entry per context token and takes the log-softmax of all of them for each
answer's log-probabilities: at 4096 tokens of this model's 49k vocabulary a reference of nine
prompts took 69 s of CPU, most of it there."""


def main() -> None:
    path, n, prompts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    raw = "--raw" in sys.argv[4:]
    if "--embed" in sys.argv[4:]:
        embedder = Llama(model_path=path, embedding=True, n_threads=len(os.sched_getaffinity(0)), flash_attn=True,
                         verbose=False)
        print(json.dumps(embedder.embed(prompts, normalize=True)))
        return
    llm = Llama(model_path=path, n_ctx=CONTEXT, n_threads=len(os.sched_getaffinity(0)), flash_attn=True,
                verbose=False, logits_all=True)
    print(json.dumps([one(llm, p, n, raw) for p in prompts]))


def one(llm: Llama, prompt: str, n: int, raw: bool) -> dict:  # type: ignore[type-arg]
    if raw:
        out = llm.create_completion(prompt, max_tokens=n, temperature=0.0, logprobs=2)
        choice = out["choices"][0]  # type: ignore[index]
        lp = choice["logprobs"]
        steps = [(t, p, sorted(top.values(), reverse=True)) for t, p, top in
                 zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])]
        text = choice["text"]
    else:
        out = llm.create_chat_completion(messages=[{"role": "user", "content": prompt}], max_tokens=n,
                                         temperature=0.0, logprobs=True, top_logprobs=2)
        choice = out["choices"][0]  # type: ignore[index]
        steps = [(c["token"], c["logprob"], sorted((t["logprob"] for t in c["top_logprobs"]), reverse=True))
                 for c in choice["logprobs"]["content"]]
        text = choice["message"]["content"]
    tokens = [[t, float(p), float(top[0] - top[1]) if len(top) > 1 else 99.0] for t, p, top in steps]
    return {"text": text, "tokens": tokens}


if __name__ == "__main__":
    main()
