"""In-process mlx-lm greedy generation, as the runner would do it (same prelude: BLAS preload; fp32).

Run as a subprocess: `python -m tests.integration.reference_generate MODEL_DIR N 'prompt'`;
prints JSON {text, tokens: [[bytes..., logprob]...], generation_tps}. With a JSON list of
prompts instead of one, prints a list of those (the model loaded once); `--raw` after them:
the prompts tokenized as they are, no chat template (legacy completions). A list may also hold
`{"raw": PROMPT, "n": N}` items: that prompt raw, with its own N (one load for both kinds).
"""

from __future__ import annotations

import json
import sys

from skulk.services.runner.prelude import prepare

prepare()  # OpenBLAS before mlx, transformers' cached index: as the runner starts

import mlx.core as mx  # noqa: E402
from mlx_lm import load, stream_generate  # noqa: E402
from mlx_lm.sample_utils import make_sampler  # noqa: E402


def main() -> None:
    model_dir, n, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    model, tok, config = load(model_dir, return_config=True)
    if config.get("quantization") or config.get("quantization_config"):
        from mlx_lm.utils import dequantize_model

        model = dequantize_model(model)  # the runner's CPU path: quantized weights run as fp32
    model.set_dtype(mx.float32)
    many, raw = prompt.startswith("["), "--raw" in sys.argv[4:]
    out = [one(model, tok, p["raw"], p.get("n", n), raw=True) if isinstance(p, dict) else one(model, tok, p, n, raw)
           for p in (json.loads(prompt) if many else [prompt])]
    print(json.dumps(out if many else out[0]))


def one(model, tok, prompt: str, n: int, raw: bool = False) -> dict:  # type: ignore[no-untyped-def]
    ids = tok.encode(prompt) if raw else tok.apply_chat_template([{"role": "user", "content": prompt}],
                                                                   add_generation_prompt=True)
    text, tokens, tps = "", [], 0.0
    for r in stream_generate(model, tok, ids, max_tokens=n, sampler=make_sampler(temp=0.0)):
        text += r.text
        tokens.append([list(tok.decode([int(r.token)]).encode()), r.logprobs[int(r.token)].item()])
        tps = r.generation_tps
    return {"text": text, "tokens": tokens, "generation_tps": tps}


if __name__ == "__main__":
    main()
