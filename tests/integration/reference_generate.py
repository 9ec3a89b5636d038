"""In-process mlx-lm greedy generation, as the runner would do it (same BLAS preload, fp32).

Run as a subprocess: `python -m tests.integration.reference_generate MODEL_DIR N 'prompt'`;
prints JSON {text, tokens: [[bytes..., logprob]...], generation_tps}.
"""

from __future__ import annotations

import json
import sys

from skulk.services.runner.blas import preload_blas

preload_blas()

import mlx.core as mx  # noqa: E402
from mlx_lm import load, stream_generate  # noqa: E402
from mlx_lm.sample_utils import make_sampler  # noqa: E402


def main() -> None:
    model_dir, n, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    model, tok = load(model_dir)
    model.set_dtype(mx.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    text, tokens, tps = "", [], 0.0
    for r in stream_generate(model, tok, ids, max_tokens=n, sampler=make_sampler(temp=0.0)):
        text += r.text
        tokens.append([list(tok.decode([int(r.token)]).encode()), r.logprobs[int(r.token)].item()])
        tps = r.generation_tps
    print(json.dumps({"text": text, "tokens": tokens, "generation_tps": tps}))


if __name__ == "__main__":
    main()
