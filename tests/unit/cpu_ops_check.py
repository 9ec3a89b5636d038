"""Run as a script (mlx stays out of the pytest process): the runner's CPU attention, SwiGLU
and RoPE against mlx's own, over the masks, head layouts and offsets mlx-lm passes; prints
JSON (the largest absolute difference per case)."""

from __future__ import annotations

import json

from skulk.services.runner.blas import preload_blas

preload_blas()

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx_lm.models.base as base  # noqa: E402
import mlx_lm.models.qwen2 as qwen2  # noqa: E402

from skulk.services.runner import cpu_ops  # noqa: E402


def main() -> None:
    mx.random.seed(0)
    assert cpu_ops.install() >= 2
    fast = qwen2.scaled_dot_product_attention
    assert fast is not base.scaled_dot_product_attention
    out = {}
    for b, heads, kv, length, span in ((2, 12, 4, 5, 9), (3, 4, 4, 1, 17), (1, 6, 2, 16, 16)):
        q = mx.random.normal((b, heads, length, 8))
        k, v = mx.random.normal((b, kv, span, 8)), mx.random.normal((b, kv, span, 8))
        offset = span - length
        causal = mx.arange(span)[None] <= (mx.arange(length)[:, None] + offset)
        padded = mx.broadcast_to(causal, (b, 1, length, span)) & (mx.arange(span) >= 1)  # left padding
        additive = mx.where(padded, 0.0, -1e9)
        masks = {"none": None, "causal": "causal", "bool": padded, "additive": additive,
                 "per_head": mx.broadcast_to(padded, (b, heads, length, span))}
        for name, mask in masks.items():
            if name == "causal" and length > span:
                continue
            ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask=mask)
            got = fast(q, k, v, None, 0.3, mask)
            out[f"{b}x{heads}/{kv}x{length}x{span} {name}"] = mx.abs(ref - got).max().item()
    g, x = mx.random.normal((4, 7, 64)) * 4, mx.random.normal((4, 7, 64))
    out["swiglu"] = mx.abs(nn.silu(g) * x - qwen2.swiglu(g, x)).max().item()
    out.update(rope_cases())
    print(json.dumps(out))


def rope_cases() -> dict[str, float]:
    """nn.RoPE (now the shared-angle path) against mx.fast.rope: int and per-row offsets, one
    and several positions, inside a shared forward pass (two layers' calls) and outside one."""
    from skulk.services.runner.cpu_rope import SharedAngles

    out = {}
    for dims, base, scale in ((8, 10000.0, 1.0), (64, 1e6, 0.5)):
        rope = nn.RoPE(dims, base=base, scale=scale)
        for b, heads, length in ((1, 4, 1), (3, 2, 5)):
            for name, offset in (("int", 7), ("rows", mx.array([3, 0, 11][:b]))):
                x = mx.random.normal((b, heads, length, dims))
                ref = mx.fast.rope(x, dims, traditional=False, base=base, scale=scale, offset=offset)
                with SharedAngles():
                    layers = [rope(x, offset), rope(x * 2, offset)]
                case = f"rope {dims}/{base:g}/{scale} {b}x{heads}x{length} {name}"
                out[case] = mx.abs(ref - rope(x, offset)).max().item()
                out[case + " shared"] = max(mx.abs(ref - layers[0]).max().item(),
                                            mx.abs(ref * 2 - layers[1]).max().item())
    return out


if __name__ == "__main__":
    main()
