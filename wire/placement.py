"""Where an instance goes (pure), with upstream's per-node memory arithmetic and messages.

Shared by the master (authoritative) and the API (previews, dry-run). Today the candidates
are the nodes in state taken one at a time (a ring of one); rings of several nodes come with
sharded placement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from skulk.wire.commands import PlaceInstance
from skulk.wire.state import Instance, NodeInfo, ShardMeta, State

GIB = 1024 ** 3
MIB = 1024 ** 2
OVERHEAD = 1.30
KV_TOKENS = 8192
HEADROOM = 256 * MIB
USABLE_FRACTION = 0.75


@dataclass(frozen=True, slots=True)
class PlacementError:
    status: int  # 400 refused, 503 info pending
    message: str


def kv_bytes(n_layers: int, kv_heads: int | None, tokens: int = KV_TOKENS) -> int:
    return 0 if not kv_heads else 2 * n_layers * tokens * kv_heads * 128 * 2


def usable(node: NodeInfo) -> int:
    return int(min(node.ram_available, USABLE_FRACTION * node.ram_total))


def required(share: int, storage: int, kv: int) -> int:
    return int(share * OVERHEAD + (share * kv / storage if storage else 0) + HEADROOM)


def place(state: State, cmd: PlaceInstance, new_id: Callable[[], str]) -> Instance | PlacementError:
    card = cmd.card
    if cmd.sharding not in ("Pipeline", "Tensor"):
        return PlacementError(400, f"Unknown sharding {cmd.sharding!r} (Pipeline or Tensor)")
    if cmd.instance_meta not in ("MlxRing", "MlxJaccl"):
        return PlacementError(400, f"Unknown instance_meta {cmd.instance_meta!r} (MlxRing or MlxJaccl)")
    if cmd.instance_meta == "MlxJaccl":
        return PlacementError(400, "Requested RDMA (MlxJaccl) but no RDMA-connected cycles available")
    nodes = sorted(state.nodes)
    if cmd.min_nodes < 1:
        return PlacementError(400, "min_nodes must be at least 1")
    if len(nodes) < cmd.min_nodes:
        return PlacementError(400, f"The topology has only {len(nodes)} node(s); a placement with "
                                   f"min_nodes={cmd.min_nodes} is impossible")
    candidates = [n for n in nodes if n not in set(cmd.excluded_nodes)]
    if not candidates:
        return PlacementError(400, f"All cycles of at least {cmd.min_nodes} node(s) touch an excluded "
                                   f"node ({len(set(cmd.excluded_nodes) & set(nodes))} node(s) excluded). "
                                   "Check the excluded_nodes list — node IDs change when a cluster "
                                   "session restarts.")
    kv = kv_bytes(card.n_layers, card.num_key_value_heads)
    reasons = []
    fitting = []
    for node_id in candidates:
        node = state.nodes[node_id]
        need, can = required(card.storage_size_bytes, card.storage_size_bytes, kv), usable(node)
        if need > can:
            reasons.append(f"cycle [{node_id}] ({cmd.sharding} sharding): node {node.friendly_name} "
                           f"needs ~{need / GIB:.1f}GB ({card.storage_size_bytes / GIB:.1f}GB weights + "
                           f"{kv / GIB:.1f}GB KV@{KV_TOKENS}tok + runtime headroom) but can use "
                           f"{can / GIB:.1f}GB (min of available and 75% of RAM)")
        else:
            fitting.append(node_id)
    if not fitting:
        return PlacementError(400, f"No candidate cycle fits {card.model_id} "
                                   f"({card.storage_size_bytes / GIB:.1f}GB of weights): " + "; ".join(reasons))
    if cmd.sharding == "Tensor" and not card.supports_tensor:
        return PlacementError(400, "Requested Tensor sharding but this model does not support "
                                   f"tensor parallelism: {card.model_id}")
    node_id = max(fitting, key=lambda n: (usable(state.nodes[n]), n))
    runner_id = f"runner-{new_id()[:12]}"
    shard = ShardMeta(kind="Pipeline", device_rank=0, world_size=1, start_layer=0,
                      end_layer=card.n_layers, n_layers=card.n_layers)  # width 1 is always Pipeline
    return Instance(instance_id=new_id(), instance_meta="MlxRing", card=card,
                    runner_to_shard={runner_id: shard}, node_to_runner={node_id: runner_id},
                    context_token_limit=context_limit(state.nodes[node_id], card.storage_size_bytes,
                                                      card.n_layers, card.num_key_value_heads,
                                                      card.context_length))


def context_limit(node: NodeInfo, storage: int, n_layers: int, kv_heads: int | None,
                  card_context: int) -> int:
    """Tokens of KV cache that fit next to the weights, capped by the model's own context."""
    per_token = kv_bytes(n_layers, kv_heads, 1)
    room = USABLE_FRACTION * node.ram_total - storage * OVERHEAD - HEADROOM
    fit = int(room / per_token) if per_token else card_context
    return max(0, min(fit, card_context)) if card_context else max(0, fit)
