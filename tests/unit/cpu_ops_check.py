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
    out.update(blocked_cases())
    print(json.dumps(out))


def rope_cases() -> dict[str, float]:
    """nn.RoPE (now the shared-angle path) against mx.fast.rope: int and per-row offsets, one
    and several positions, inside a shared forward pass (two layers' calls) and outside one."""
    from skulk.services.runner.cpu_rope import SharedAngles

    out = {}
    for dims, rope_base, scale in ((8, 10000.0, 1.0), (64, 1e6, 0.5)):
        rope = nn.RoPE(dims, base=rope_base, scale=scale)
        for b, heads, length in ((1, 4, 1), (3, 2, 5)):
            for name, offset in (("int", 7), ("rows", mx.array([3, 0, 11][:b]))):
                x = mx.random.normal((b, heads, length, dims))
                ref = mx.fast.rope(x, dims, traditional=False, base=rope_base, scale=scale, offset=offset)
                with SharedAngles():
                    layers = [rope(x, offset), rope(x * 2, offset)]
                case = f"rope {dims}/{rope_base:g}/{scale} {b}x{heads}x{length} {name}"
                out[case] = mx.abs(ref - rope(x, offset)).max().item()
                out[case + " shared"] = max(mx.abs(ref - layers[0]).max().item(),
                                            mx.abs(ref * 2 - layers[1]).max().item())
    return out


def blocked_cases() -> dict[str, float]:
    """Decode matmuls in row blocks (`cpu_linear`): how much a row differs between the batch
    sizes (1..16) it is computed in (nothing, where this machine's BLAS is exact), and whether
    the runner's own check at load (`exact_here`) finds it so; close to `x @ w.T` (relative),
    including a weight whose rows no 16-row block divides (673: a smaller last block) and a
    single stream; the inputs it must leave to sgemm; `install` swapping an fp32 model's
    layers in (a tied embedding's output projection too) where exact, and leaving them when
    it must."""
    import os

    from skulk.services.runner import cpu_linear

    out = {}
    for streams in (True, False):
        blocked = cpu_linear.BlockedMatmul(two_streams=streams)
        for n_out, n_in in ((2048, 768), (768, 2048), (256, 768), (48, 32), (673, 768)):
            w = mx.random.normal((n_out, n_in)) * 0.05
            x = mx.random.normal((16, 1, n_in))
            alone = [blocked(x[i:i + 1], w) for i in range(16)]
            worst = 0.0
            for rows in range(1, 17):
                got = blocked(x[:rows], w)
                worst = max(worst, max(mx.abs(got[i] - alone[i][0]).max().item() for i in range(rows)))
            out[f"blocked alone {n_out}x{n_in} {streams}"] = worst
            out[f"blocked check {n_out}x{n_in} {streams}"] = float(cpu_linear.exact_here(blocked, [w]) == "")
            ref = x @ w.T
            relative = mx.abs(blocked(x, w) - ref).max() / mx.abs(ref).max()
            out[f"blocked vs sgemm {n_out}x{n_in} {streams}"] = relative.item()
    w = mx.zeros((64, 32))
    leaves = {"prompt rows": mx.zeros((2, 3, 32)), "2-D batch": mx.zeros((4, 32)), "17 rows": mx.zeros((17, 1, 32)),
              "too wide": mx.zeros((2, 1, 4864))}
    takes = {"one row 2-D": mx.zeros((1, 32)), "decode rows": mx.zeros((5, 1, 32))}
    out["blocked leaves"] = float(any(blocked.applies(x, mx.zeros((8, x.shape[-1]))) for x in leaves.values()))
    out["blocked takes"] = float(not all(blocked.applies(x, w) for x in takes.values()))
    os.environ["SKULK_CPU_BLOCKED_MATMUL"] = "1"

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(40, 64)
            self.proj = nn.Linear(64, 64)

        def __call__(self, x: mx.array) -> mx.array:
            return self.embed.as_linear(self.proj(x))

    model = Tied()
    x = mx.random.normal((3, 1, 64))
    ref = (x @ model.proj.weight.T + model.proj.bias) @ model.embed.weight.T
    choice = cpu_linear.install(model, 16, sharded=False)
    swapped = type(model.proj) is not nn.Linear and type(model.embed) is not nn.Embedding
    exact = cpu_linear.exact_here(cpu_linear.BlockedMatmul(two_streams=True),
                                  [model.proj.weight, model.embed.weight]) == ""
    out["blocked exact here"] = float(exact)
    out["blocked install"] = float(choice.blocked != exact or swapped != exact
                                   or (choice.reason is not cpu_linear.Reason.NOT_EXACT) == (not exact))
    out["blocked tied model"] = (mx.abs(model(x) - ref).max() / mx.abs(ref).max()).item()
    again = cpu_linear.install(Tied(), 16, sharded=False)  # the same shapes: the first install's check, kept
    out["blocked kept for the next start"] = float(again.blocked != choice.blocked
                                                   or not again.detail.endswith("measured at an earlier start")
                                                   or "measured at an earlier start" in choice.detail)
    kept = [cpu_linear.install(nn.Linear(4, 4), 17, sharded=False),
            cpu_linear.install(nn.Linear(4, 4), 8, sharded=True)]
    out["blocked kept off"] = float(any(c.blocked for c in kept))
    return out


if __name__ == "__main__":
    main()
