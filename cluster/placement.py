"""Where an instance goes (pure), with upstream's per-node memory arithmetic and messages.

Shared by the master (authoritative) and the API (previews). Candidates are rings of at least
`min_nodes` nodes (every pair of live nodes is connected through gossip, so any set of nodes
is a ring; ranks follow the sorted node order); memory is checked per node, never summed:
Tensor splits weights evenly, Pipeline splits layers in proportion to each node's usable
memory; every node must hold its share times the runtime overhead plus the KV reserve plus
headroom, so a model equal to free memory is refused. The smallest fitting ring wins.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from skulk.cluster import engines, ring_search
from skulk.cluster.catalog import cards_of
from skulk.cluster.ring_search import Ring
from skulk.cluster.state import Instance, NodeInfo, ShardMeta, State
from skulk.node.model_cards import LLAMA_LAYOUT
from skulk.wire.commands import PlaceInstance, RejectReason
from skulk.wire.models import EngineKind, ModelCard

GIB = 1024 ** 3
MIB = 1024 ** 2
OVERHEAD = 1.30
KV_TOKENS = 8192
HEADROOM = 256 * MIB
USABLE_FRACTION = 0.75
RING_PORTS = (61000, 65000)
"""Above Linux's default ephemeral range (32768-60999), so an outgoing connection never holds
a ring port; the runner still checks its port before forming the ring (macOS's ephemeral range
covers these ports too)."""


@dataclass(frozen=True, slots=True)
class PlacementError:
    status: int  # 400 refused
    message: str
    reason: RejectReason = RejectReason.PLACEMENT_REFUSED


def kv_bytes(n_layers: int, kv_heads: int | None, tokens: int = KV_TOKENS) -> int:
    return 0 if not kv_heads else 2 * n_layers * tokens * kv_heads * 128 * 2


GPU_FRACTION = 0.90
"""Of a discrete GPU's memory, what runners may hold (upstream's usable VRAM)."""


def device_of(node: NodeInfo) -> str:
    return node.accelerator.kind if node.accelerator is not None else "cpu"


def on_gpu(node: NodeInfo) -> bool:
    return node.accelerator is not None and node.accelerator.kind in ("cuda", "metal")


def usable(node: NodeInfo) -> int:
    """Memory a node's runners may hold: a CUDA GPU's own (90 %), else RAM (Metal's is unified)."""
    acc = node.accelerator
    if acc is not None and acc.kind == "cuda" and acc.memory_bytes:
        return int(GPU_FRACTION * acc.memory_bytes)
    return int(min(node.ram_available, USABLE_FRACTION * node.ram_total))


def capacity(node: NodeInfo) -> int:
    """All a node's runners may hold, placed or not (a CUDA GPU's 90 %; 75 % of RAM)."""
    acc = node.accelerator
    if acc is not None and acc.kind == "cuda" and acc.memory_bytes:
        return int(GPU_FRACTION * acc.memory_bytes)
    return int(USABLE_FRACTION * node.ram_total)


def room(state: State, node_id: str) -> int:
    """What a new runner on `node_id` may still hold. RAM is read live (`ram_available` already
    counts loaded runners); a CUDA GPU's memory is reported once, so the instances placed on it
    are taken off here."""
    node = state.nodes[node_id]
    acc = node.accelerator
    if acc is None or acc.kind != "cuda" or not acc.memory_bytes:
        return usable(node)
    placed = 0
    for inst in state.instances.values():
        runner = inst.node_to_runner.get(node_id)
        if runner is None or runner not in inst.runner_to_shard:
            continue
        shard, whole = inst.runner_to_shard[runner], held(inst.card, node, engines.kind_of(inst.engine))
        placed += (whole * (shard.end_layer - shard.start_layer) // max(1, shard.n_layers)
                   if shard.kind == "Pipeline" else whole // max(1, shard.world_size))
    return max(0, usable(node) - placed)


def held(card: ModelCard, node: NodeInfo, engine: EngineKind = EngineKind.MLX) -> int:
    """The weights a runner on `node` holds: llama.cpp's GGUF file as stored; MLX's on a GPU the
    checkpoint as stored (a quantized model stays quantized unless its bf16 copy fits the GPU's
    free memory at load: `runner.quantized`), on the CPU every parameter in fp32
    (`ModelCard.memory_bytes`)."""
    return engines.weights_held(card, engine, on_gpu(node))


def required(share: int, storage: int, kv: int) -> int:
    return int(share * OVERHEAD + (share * kv / storage if storage else 0) + HEADROOM)


def layer_split(n_layers: int, weights: list[int]) -> list[int]:
    """Layers per node in proportion to `weights` (largest remainder, at least 1 each)."""
    total = sum(weights) or 1
    exact = [n_layers * w / total for w in weights]
    split = [max(1, int(e)) for e in exact]
    while sum(split) > n_layers:
        i = max((i for i in range(len(split)) if split[i] > 1), key=lambda i: split[i] - exact[i])
        split[i] -= 1
    while sum(split) < n_layers:
        split[max(range(len(split)), key=lambda i: exact[i] - split[i])] += 1
    return split


def shares(card: ModelCard, ring: tuple[str, ...], state: State, sharding: str,
           engine: EngineKind = EngineKind.MLX, rooms: Mapping[str, int] | None = None) -> list[int]:
    """The weights each node of `ring` holds (Tensor: an even part; Pipeline: by room).
    `rooms`: each node's `room`, where the caller has them already."""
    nodes = [state.nodes[n] for n in ring]
    if sharding == "Tensor":
        return [held(card, node, engine) // len(ring) for node in nodes]
    ring_rooms = [rooms[n] if rooms is not None else room(state, n) for n in ring]
    total = sum(ring_rooms) or 1
    return [int(held(card, node, engine) * r / total) for node, r in zip(nodes, ring_rooms)]


def drafter_bytes(state: State, card: ModelCard, node: NodeInfo, width: int,
                  engine: EngineKind = EngineKind.MLX) -> int:
    """What the drafter the card names adds on a one-node instance (sharded ones do not
    speculate), where the catalog knows it."""
    if not card.drafter or width != 1 or engine is not EngineKind.MLX:  # llama.cpp does not speculate
        return 0
    drafter = cards_of(state.catalog).get(card.drafter)
    return held(drafter, node) if drafter is not None else 0


def _shortfall(state: State, card: ModelCard, node_id: str, share: int, width: int, engine: EngineKind,
               kv: int, rooms: Mapping[str, int]) -> tuple[int, int] | None:
    """(what the node needs, what it can use) when `share` of the weights does not fit it."""
    node = state.nodes[node_id]
    drafter = int(drafter_bytes(state, card, node, width, engine) * OVERHEAD)
    need = required(share, held(card, node, engine), kv) + drafter
    can = rooms[node_id]
    return (need, can) if need > can else None


def _misfit(card: ModelCard, ring: tuple[str, ...], state: State, sharding: str,
            engine: EngineKind, rooms: Mapping[str, int]) -> str | None:
    tokens = engines.kv_tokens(engine, KV_TOKENS, card.is_embedding)
    kv = kv_bytes(card.n_layers, card.num_key_value_heads, tokens)
    for node_id, share in zip(ring, shares(card, ring, state, sharding, engine, rooms)):
        node = state.nodes[node_id]
        whole = held(card, node, engine)
        short = _shortfall(state, card, node_id, share, len(ring), engine, kv, rooms)
        if short:
            need, can = short
            kv_share = kv * share / whole if whole else 0
            return (f"cycle [{', '.join(ring)}] ({sharding} sharding): node {node.friendly_name} "
                    f"needs ~{need / GIB:.1f}GB ({share / GIB:.1f}GB weights + {kv_share / GIB:.1f}GB "
                    f"KV@{tokens}tok + runtime headroom) on {engine} but can use {can / GIB:.1f}GB "
                    + ("(90% of its GPU's memory)" if node.accelerator is not None and node.accelerator.kind == "cuda"
                       else "(min of available and 75% of RAM)"))
    return None


def ring_port(instance_id: str, rank: int) -> int:
    digest = int(hashlib.sha256(f"{instance_id}:{rank}".encode()).hexdigest(), 16)
    lo, hi = RING_PORTS
    return lo + digest % (hi - lo)


def nodes_without(state: State, model_id: str) -> set[str]:
    """The nodes whose catalog says they lack `model_id`: none when the store has it (it is
    staged where it runs); a node that has not reported its catalog yet is not counted."""
    entries = list(state.catalog.values())
    if any(e.in_store and any(c.model_id == model_id for c in e.cards) for e in entries):
        return set()
    return {e.node_id for e in entries if not e.in_store and all(c.model_id != model_id for c in e.cards)}


EXPLAINED_RINGS = 512
"""When nothing fits, the reasons quoted come from at most this many rings (in ring order)."""


def place(state: State, cmd: PlaceInstance, new_id: Callable[[], str]) -> Instance | PlacementError:
    card = cmd.card
    if cmd.sharding not in ("Pipeline", "Tensor"):
        return PlacementError(400, f"Unknown sharding {cmd.sharding!r} (Pipeline or Tensor)")
    if cmd.instance_meta not in ("MlxRing", "MlxJaccl"):
        return PlacementError(400, f"Unknown instance_meta {cmd.instance_meta!r} (MlxRing or MlxJaccl)")
    if cmd.min_nodes < 1:
        return PlacementError(400, "min_nodes must be at least 1")
    if card.is_embedding and cmd.min_nodes > 1:  # the embedding runner has no lock-step ranks
        return PlacementError(400, f"{card.model_id} is an embedding model: it runs on one node "
                                   f"(min_nodes=1), not across {cmd.min_nodes}")
    nodes = sorted(state.nodes)
    if len(nodes) < cmd.min_nodes:
        return PlacementError(400, f"The topology has only {len(nodes)} node(s); a placement with "
                                   f"min_nodes={cmd.min_nodes} is impossible", RejectReason.TOO_FEW_NODES)
    excluded = set(cmd.excluded_nodes) & set(nodes)
    lacking = nodes_without(state, card.model_id)
    if lacking:  # no store has it: a node whose models dir lacks it cannot run it
        excluded |= lacking & set(nodes)
        if len(set(nodes) - excluded) < cmd.min_nodes:
            return PlacementError(400, f"{card.model_id} is not in the models dir of node(s) "
                                       f"{', '.join(sorted(lacking))} and no model store has it: without them "
                                       f"(and the excluded nodes) a placement with min_nodes={cmd.min_nodes} is "
                                       "impossible (copy it to more nodes, or keep it in the model store)")
    pool = [n for n in nodes if n not in excluded]
    if len(pool) < cmd.min_nodes:
        return PlacementError(400, f"All cycles of at least {cmd.min_nodes} node(s) touch an excluded "
                                   f"node ({len(excluded)} node(s) excluded). Check the excluded_nodes "
                                   "list — node IDs change when a cluster session restarts.")
    by_device: dict[str, list[str]] = {}
    for n in pool:
        by_device.setdefault(device_of(state.nodes[n]), []).append(n)
    if all(len(group) < cmd.min_nodes for group in by_device.values()):
        # ranks on different devices run different dtypes and warm-ups: they cannot agree
        kinds = ", ".join(sorted(f"{device_of(state.nodes[n])} on {state.nodes[n].friendly_name}" for n in pool))
        return PlacementError(400, f"No cycle of at least {cmd.min_nodes} node(s) computes on one kind of "
                                   f"device ({kinds}): the ranks of an instance must all use the same one")
    rooms = {n: room(state, n) for n in pool}
    single, wide = ring_search.pools(card, state.nodes, by_device, rooms, cmd.engine)
    widths = range(cmd.min_nodes, (1 if card.is_embedding else len(pool)) + 1)
    some_fit = some_engine = False
    for width in widths:
        pools = single if width == 1 else [p for p in wide if len(p.nodes) >= width]
        if not pools:
            continue
        some_engine = True
        found = _roomiest_fitting(state, card, cmd, pools, width, rooms)
        if found is None:
            continue
        some_fit = True
        if _width_allowed(card, cmd.sharding, width):
            return _finish(state, card, cmd, *found, new_id)
    if not some_fit:
        misfits, refusals = _explain(state, card, cmd, pool, rooms, want_misfits=some_engine)
        if not some_engine:
            return PlacementError(400, f"No candidate cycle can run {card.model_id}: " + "; ".join(refusals))
        return PlacementError(400, f"No candidate cycle fits {card.model_id} "
                                   f"({card.memory_bytes / GIB:.1f}GB of weights): " + "; ".join(misfits[:3]))
    if cmd.sharding == "Tensor":
        if not card.supports_tensor:
            return PlacementError(400, "Requested Tensor sharding but this model does not support "
                                       f"tensor parallelism: {card.model_id}")
        return PlacementError(400, f"No tensor sharding found for model with hidden_size="
                                   f"{card.hidden_size}, num_key_value_heads={card.num_key_value_heads or 0} "
                                   "across candidate cycles")
    return PlacementError(400, f"Requested Pipeline sharding across {cmd.min_nodes}+ nodes but this model "
                               f"does not support pipeline parallelism ({card.family} in mlx-lm): "
                               f"{card.model_id}")


def _roomiest_fitting(state: State, card: ModelCard, cmd: PlaceInstance, pools: list[ring_search.Pool],
                      width: int, rooms: dict[str, int]) -> tuple[Ring, EngineKind] | None:
    """The ring of `width` placement takes (`ring_search`), with its engine; None if none fits."""
    best: dict[bool, tuple[tuple[int, Ring], EngineKind]] = {}  # steady (no restarting node) or not
    restarting = frozenset(state.restarting)
    for p in pools:
        def fits(ring: Ring, engine: EngineKind = p.engine) -> bool:
            return _misfit(card, ring, state, cmd.sharding, engine, rooms) is None

        for steady, avoid in ((True, restarting), (False, frozenset())):
            ring = ring_search.best_in_pool(p, width, avoid, fits)
            if ring is not None:
                rank = ring_search.total_room(ring, rooms)
                if steady not in best or rank > best[steady][0]:
                    best[steady] = (rank, p.engine)
            if not restarting:
                break
    # A node draining before an in-place restart gets a new instance only when every ring of this
    # width needs it (its runner then starts when the node is back).
    chosen = best.get(True) or best.get(False)
    return (chosen[0][1], chosen[1]) if chosen else None


def _width_allowed(card: ModelCard, sharding: str, width: int) -> bool:
    """Whether the model can be split `width` ways this way (Tensor: by heads; Pipeline: by layers)."""
    if sharding == "Tensor":
        kv = card.num_key_value_heads or 0
        return card.supports_tensor and (width == 1 or (card.hidden_size % width == 0 and kv > 0 and kv % width == 0)
                                         or (card.family in LLAMA_LAYOUT and 0 < kv and kv >= width))  # by head groups
    return card.supports_pipeline or width == 1


def _finish(state: State, card: ModelCard, cmd: PlaceInstance, ring: Ring, engine: EngineKind,
            new_id: Callable[[], str]) -> Instance | PlacementError:
    if cmd.instance_meta == "MlxJaccl":
        return PlacementError(400, "Requested RDMA (MlxJaccl) but no RDMA-connected cycles available")
    sharding = "Pipeline" if len(ring) == 1 else cmd.sharding  # width 1 is always Pipeline
    if sharding == "Pipeline" and card.n_layers < len(ring):
        return PlacementError(400, f"{card.model_id} has {card.n_layers} layers, fewer than the "
                                   f"{len(ring)} nodes of the ring")
    return _instance(state, card, ring, sharding, new_id, engine)


def _explain(state: State, card: ModelCard, cmd: PlaceInstance, pool: list[str], rooms: dict[str, int],
             want_misfits: bool) -> tuple[list[str], list[str]]:
    """Why rings do not fit (the first three: `want_misfits`) or have no engine (each reason
    once), from the first `EXPLAINED_RINGS` rings in ring order (by width, then node ids)."""
    widths = range(cmd.min_nodes, (1 if card.is_embedding else len(pool)) + 1)
    rings = (r for k in widths for r in itertools.combinations(pool, k)
             if len({device_of(state.nodes[n]) for n in r}) == 1)
    misfits: list[str] = []
    refusals: dict[str, None] = {}
    for ring in itertools.islice(rings, EXPLAINED_RINGS):
        engine = engines.choose(card, [state.nodes[n] for n in ring], cmd.engine)
        if isinstance(engine, engines.Refused):
            refusals.setdefault(engine.reason)
        elif want_misfits and (why := _misfit(card, ring, state, cmd.sharding, engine, rooms)):
            misfits.append(why)
            if len(misfits) == 3:
                break
    return misfits, list(refusals)


def _instance(state: State, card: ModelCard, ring: tuple[str, ...], sharding: str,
              new_id: Callable[[], str], engine: EngineKind = EngineKind.MLX) -> Instance:
    instance_id = new_id()
    n = len(ring)
    split = (layer_split(card.n_layers, [room(state, x) for x in ring])
             if sharding == "Pipeline" else [card.n_layers] * n)
    runner_to_shard, node_to_runner, hosts = {}, {}, []
    for rank, node_id in enumerate(ring):
        runner_id = f"runner-{new_id()[-12:]}"
        if sharding == "Pipeline":  # mlx-lm: rank r runs the layers after ranks r+1 .. n-1
            start = sum(split[rank + 1:])
            end = start + split[rank]
        else:
            start, end = 0, card.n_layers
        runner_to_shard[runner_id] = ShardMeta(kind=sharding, device_rank=rank, world_size=n,
                                               start_layer=start, end_layer=end, n_layers=card.n_layers)
        node_to_runner[node_id] = runner_id
        address = (state.nodes[node_id].addresses or ("127.0.0.1",))[0]
        hosts.append(f"{address}:{ring_port(instance_id, rank)}")
    limit = min(context_limit(state.nodes[x], held(card, state.nodes[x], engine) * (end_ - start_) // card.n_layers
                              if sharding == "Pipeline" else held(card, state.nodes[x], engine) // n,
                              card.n_layers, card.num_key_value_heads, card.context_length)
                for x, (start_, end_) in zip(ring, [(s.start_layer, s.end_layer) for s in runner_to_shard.values()]))
    return Instance(instance_id=instance_id, instance_meta="MlxRing", card=card,
                    runner_to_shard=runner_to_shard, node_to_runner=node_to_runner,
                    context_token_limit=limit, ring_hosts=tuple(hosts) if n > 1 else (), engine=engine.value)


def context_limit(node: NodeInfo, weights: int, n_layers: int, kv_heads: int | None,
                  card_context: int) -> int:
    """Tokens of KV cache that fit next to this node's weights, capped by the model's context."""
    per_token = kv_bytes(n_layers, kv_heads, 1)
    free = capacity(node) - weights * OVERHEAD - HEADROOM
    fit = int(free / per_token) if per_token else card_context
    return max(0, min(fit, card_context)) if card_context else max(0, fit)
