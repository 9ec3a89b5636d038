"""Splits of the llama layout across ranks where mlx-lm has none.

mlx-lm's llama class (llama, mistral and what it maps onto it) has no `pipeline`, and its
`shard` needs the attention heads to divide by the ring's size: SmolLM2-135M has 3 key-value
heads, so neither split worked across two nodes. Here:
- Pipeline: each rank keeps its own run of layers (rank 0 the last ones, as mlx-lm's
  `PipelineMixin`); the first receives the hidden state from the rank before it, the last sends
  it on, and every rank gathers rank 0's output, as the mixin does.
- Tensor with heads that do not divide: whole key-value head groups per rank (3 over 2 ranks:
  2 and 1, with their query heads), the MLP's columns split likewise, each block's output summed
  across ranks (`all_sum`) as mlx-lm's sharded linears do.
`mlx` is imported inside the functions (after `blas.preload_blas()` ran).
"""

from __future__ import annotations

from typing import Any


def even_parts(total: int, size: int) -> list[int]:
    """`total` units over `size` ranks, the low ranks taking the extra ones."""
    base, extra = divmod(total, size)
    return [base + (1 if r < extra else 0) for r in range(size)]


def head_split(n_heads: int, n_kv_heads: int, size: int, rank: int) -> tuple[slice, slice]:
    """(query heads, key-value heads) of `rank`: whole groups of queries with their kv head."""
    if n_kv_heads < size or n_heads % n_kv_heads:
        raise ValueError(f"{n_kv_heads} key-value heads cannot be split over {size} ranks")
    kv = even_parts(n_kv_heads, size)
    start = sum(kv[:rank])
    per_group = n_heads // n_kv_heads
    return (slice(start * per_group, (start + kv[rank]) * per_group), slice(start, start + kv[rank]))


def divides(layer: Any, size: int) -> bool:
    """Whether mlx-lm's own `shard` can split this block over `size` ranks (even heads and MLP)."""
    attn, mlp = layer.self_attn, layer.mlp
    width = mlp.gate_proj.weight.shape[0]
    return not (attn.n_heads % size or attn.n_kv_heads % size or width % size)


def pipeline(model: Any, group: Any, split: list[int]) -> None:
    """Keep this rank's layers of `model` (a `LlamaModel`), wired to its neighbours."""
    import mlx.core as mx
    import mlx.nn as nn

    rank, size = group.rank(), group.size()
    if any(getattr(layer, "use_sliding", False) for layer in model.layers):
        raise ValueError("a model with sliding-window layers cannot be split into a pipeline here")
    if len(split) != size or sum(split) != len(model.layers) or min(split) <= 0:
        raise ValueError(f"split {split} does not cover {len(model.layers)} layers over {size} ranks")
    start = sum(split[rank + 1:])
    end = start + split[rank]

    class Edge(nn.Module):
        """A layer at the end of this rank's run: receive before it, send and gather after it."""

        def __init__(self, layer: Any, first: bool, last: bool) -> None:
            super().__init__()
            self.layer, self.first, self.last = layer, first, last
            self.use_sliding = False

        def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
            if self.first and rank < size - 1:
                x = mx.distributed.recv_like(x, rank + 1, group=group)
            x = self.layer(x, *args, **kwargs)
            if self.last:
                if rank != 0:
                    x = mx.distributed.send(x, rank - 1, group=group)
                    cache = kwargs.get("cache", args[1] if len(args) > 1 else None)
                    if cache is not None and getattr(cache, "keys", None) is not None:
                        # evaluating the cache (a prefill chunk) must send too, or the next rank waits
                        cache.keys = mx.depends(cache.keys, x)
                x = mx.distributed.all_gather(x, group=group)[: x.shape[0]]
            return x

    mine = list(model.layers[start:end])
    mine[0] = Edge(mine[0], True, len(mine) == 1)
    if len(mine) > 1:
        mine[-1] = Edge(mine[-1], False, True)
    model.layers = mine


def tensor(model: Any, group: Any) -> None:
    """Split every block of `model` (a `LlamaModel`) by whole head groups and MLP columns."""
    import mlx.core as mx
    import mlx.nn as nn

    rank, size = group.rank(), group.size()

    class SumAcross(nn.Module):
        """`x @ W.T` of this rank's input columns, summed over the ranks (then the bias)."""

        def __init__(self, weight: Any, bias: Any) -> None:
            super().__init__()
            self.weight = weight
            if bias is not None:
                self.bias = bias

        def __call__(self, x: Any) -> Any:
            y = mx.distributed.all_sum(x @ self["weight"].T, group=group)
            return y + self["bias"] if "bias" in self else y

    def rows(linear: Any, part: slice) -> Any:
        out = nn.Linear(1, 1, bias="bias" in linear)
        out.weight = mx.contiguous(linear.weight[part])
        if "bias" in linear:
            out.bias = mx.contiguous(linear.bias[part])
        return out

    def columns(linear: Any, part: slice) -> Any:
        return SumAcross(mx.contiguous(linear.weight[:, part]), linear.bias if "bias" in linear else None)

    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        q, kv = head_split(attn.n_heads, attn.n_kv_heads, size, rank)
        hd = attn.head_dim
        q_dims, kv_dims = slice(q.start * hd, q.stop * hd), slice(kv.start * hd, kv.stop * hd)
        attn.q_proj, attn.k_proj, attn.v_proj = rows(attn.q_proj, q_dims), rows(attn.k_proj, kv_dims), \
            rows(attn.v_proj, kv_dims)
        attn.o_proj = columns(attn.o_proj, q_dims)
        attn.n_heads, attn.n_kv_heads = q.stop - q.start, kv.stop - kv.start
        width = mlp.gate_proj.weight.shape[0]
        parts = even_parts(width, size)
        cols = slice(sum(parts[:rank]), sum(parts[:rank + 1]))
        mlp.gate_proj, mlp.up_proj = rows(mlp.gate_proj, cols), rows(mlp.up_proj, cols)
        mlp.down_proj = columns(mlp.down_proj, cols)
