"""llama.cpp's own greedy answers on a GGUF file, through the binding's single-sequence `Llama`
with llama.cpp's own defaults (flash attention as `llama-server` picks on a CPU).

Run as a subprocess: `python -m tests.integration.reference_llama FILE.gguf N '["prompt", ...]'`
[--raw]; prints a JSON list of {text, tokens: [[text, logprob, margin]...]} per prompt, where
`margin` is how far the chosen token's log-probability is above the runner-up's (a near-tie that
a different batch shape may break the other way) and `noise`, how far llama.cpp's own
log-probabilities move when the prompts share its cache (`cache_noise`). `--raw`: legacy
completions of the prompts as they are, no chat template. `--embed` (an embedding GGUF):
llama.cpp's own unit vectors of the texts, as a JSON list of lists.
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
    refs = [one(llm, p, n, raw) for p in prompts]
    # each prompt twice: a cache about as full as a runner's with eight rows and its cached prefixes
    noise = cache_noise(llm, refs + refs, n) if len(refs) > 1 else 0.0
    print(json.dumps([{"text": r["text"], "tokens": r["tokens"], "noise": noise} for r in refs]))


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
    return {"text": text, "tokens": tokens, "ids": ids}


def cache_noise(llm: Llama, refs: list[dict], n: int) -> float:  # type: ignore[type-arg]
    """The most a chosen token's log-probability moves when llama.cpp answers the prompts all at
    once in one unified cache, as a batching runner does, instead of each alone (over the tokens
    where both answers still agree). On some CPUs this is 0; on others (an AVX-512 Zen 4)
    llama.cpp's flash attention gives a sequence other results once other sequences' cells share
    its cache: 0.15-0.38 nats seen there. The `Llama` object holds one sequence, so this is
    llama.cpp's C API on the same loaded model (none of the engine's code)."""
    import llama_cpp as lc

    prompts = [r["ids"][:len(r["ids"]) - len(r["tokens"])] for r in refs]
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = CONTEXT * len(prompts)
    cparams.n_batch = cparams.n_ubatch = sum(map(len, prompts))
    cparams.n_seq_max, cparams.kv_unified = len(prompts), True
    cparams.n_threads = cparams.n_threads_batch = threads()
    cparams.flash_attn_type = 1  # enabled, as the `Llama` above
    ctx = lc.llama_init_from_model(llm._model.model, cparams)
    batch = lc.llama_batch_init(cparams.n_batch, 0, len(prompts))
    try:
        rows, k = [], 0
        for seq, ids in enumerate(prompts):
            for pos, token in enumerate(ids):
                batch.token[k], batch.pos[k], batch.n_seq_id[k], batch.logits[k] = token, pos, 1, pos == len(ids) - 1
                batch.seq_id[k][0] = seq
                k += 1
            rows.append(k - 1)
        batch.n_tokens = k
        worst, live = 0.0, set(range(len(prompts)))
        for step in range(n):
            assert lc.llama_decode(ctx, batch) == 0
            k = 0
            for seq, row in enumerate(rows):
                logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, row), shape=(llm.n_vocab(),))
                logprobs = Llama.logits_to_logprobs(logits)
                chosen = int(np.argmax(logprobs))
                alone = refs[seq]["ids"][len(prompts[seq]):]
                if seq in live and step < len(alone) and chosen == alone[step]:
                    worst = max(worst, abs(float(logprobs[chosen]) - refs[seq]["tokens"][step][1]))
                else:
                    live.discard(seq)  # parted (or ended): what follows is another answer
                batch.token[k], batch.pos[k], batch.n_seq_id[k] = chosen, len(prompts[seq]) + step, 1
                batch.logits[k], batch.seq_id[k][0] = True, seq
                rows[seq] = k
                k += 1
            batch.n_tokens = k
        return worst
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)


if __name__ == "__main__":
    main()
