"""Placement's bounded ring search (`cluster/ring_search.py`) gives the answers an enumeration of
every subset of nodes gave: the same ring, engine and shards, or the same refusal, on generated
clusters (devices, engines, memory with ties, restarting and excluded nodes, cards that split or
not). `exhaustive_place` is placement as it was before the search: kept here as the oracle."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skulk.cluster import engines
from skulk.cluster.placement import (
    GIB,
    LLAMA_LAYOUT,
    PlacementError,
    _instance,
    _misfit,
    device_of,
    nodes_without,
    place,
    room,
)
from skulk.cluster.state import Instance, NodeInfo, State
from skulk.wire.accelerator import Accelerator
from skulk.wire.commands import PlaceInstance, RejectReason
from skulk.wire.models import EngineKind, ModelCard, ModelTask


def exhaustive_place(state: State, cmd: PlaceInstance, new_id: Callable[[], str]) -> Instance | PlacementError:
    """Every ring of at least `min_nodes` nodes enumerated, each checked (the search's oracle)."""
    card = cmd.card
    if cmd.sharding not in ("Pipeline", "Tensor"):
        return PlacementError(400, f"Unknown sharding {cmd.sharding!r} (Pipeline or Tensor)")
    if cmd.instance_meta not in ("MlxRing", "MlxJaccl"):
        return PlacementError(400, f"Unknown instance_meta {cmd.instance_meta!r} (MlxRing or MlxJaccl)")
    if cmd.min_nodes < 1:
        return PlacementError(400, "min_nodes must be at least 1")
    if card.is_embedding and cmd.min_nodes > 1:
        return PlacementError(400, f"{card.model_id} is an embedding model: it runs on one node "
                                   f"(min_nodes=1), not across {cmd.min_nodes}")
    nodes = sorted(state.nodes)
    if len(nodes) < cmd.min_nodes:
        return PlacementError(400, f"The topology has only {len(nodes)} node(s); a placement with "
                                   f"min_nodes={cmd.min_nodes} is impossible", RejectReason.TOO_FEW_NODES)
    excluded = set(cmd.excluded_nodes) & set(nodes)
    lacking = nodes_without(state, card.model_id)
    if lacking:
        excluded |= lacking & set(nodes)
        if len(set(nodes) - excluded) < cmd.min_nodes:
            return PlacementError(400, "lacking")
    rings = [r for k in range(cmd.min_nodes, len(nodes) + 1) for r in itertools.combinations(nodes, k)]
    rings = [r for r in rings if not excluded & set(r) and (len(r) == 1 or not card.is_embedding)]
    if not rings:
        return PlacementError(400, f"All cycles of at least {cmd.min_nodes} node(s) touch an excluded "
                                   f"node ({len(excluded)} node(s) excluded). Check the excluded_nodes "
                                   "list — node IDs change when a cluster session restarts.")
    alike = [r for r in rings if len({device_of(state.nodes[n]) for n in r}) == 1]
    if not alike:
        kinds = ", ".join(sorted(f"{device_of(state.nodes[n])} on {state.nodes[n].friendly_name}"
                                 for n in {n for r in rings for n in r}))
        return PlacementError(400, f"No cycle of at least {cmd.min_nodes} node(s) computes on one kind of "
                                   f"device ({kinds}): the ranks of an instance must all use the same one")
    rings = alike
    rooms = {n: room(state, n) for n in nodes}
    misfits: list[str] = []
    fitting: list[tuple[str, ...]] = []
    chosen: dict[tuple[str, ...], EngineKind] = {}
    refusals: list[str] = []
    for ring in rings:
        engine = engines.choose(card, [state.nodes[n] for n in ring], cmd.engine)
        if isinstance(engine, engines.Refused):
            refusals.append(engine.reason)
            continue
        why = _misfit(card, ring, state, cmd.sharding, engine, rooms)
        if why:
            misfits.append(why)
        else:
            fitting.append(ring)
            chosen[ring] = engine
    if not fitting and not misfits:
        return PlacementError(400, f"No candidate cycle can run {card.model_id}: " + "; ".join(dict.fromkeys(refusals)))
    if not fitting:
        return PlacementError(400, f"No candidate cycle fits {card.model_id} "
                                   f"({card.memory_bytes / GIB:.1f}GB of weights): " + "; ".join(misfits[:3]))
    sharding = cmd.sharding
    if sharding == "Tensor":
        if not card.supports_tensor:
            return PlacementError(400, "Requested Tensor sharding but this model does not support "
                                       f"tensor parallelism: {card.model_id}")
        kv = card.num_key_value_heads or 0
        divisible = [r for r in fitting if len(r) == 1 or (card.hidden_size % len(r) == 0
                                                            and kv and kv % len(r) == 0)
                     or (card.family in LLAMA_LAYOUT and kv and kv >= len(r))]
        if not divisible:
            return PlacementError(400, f"No tensor sharding found for model with hidden_size="
                                       f"{card.hidden_size}, num_key_value_heads={kv} across candidate cycles")
        fitting = divisible
    if sharding == "Pipeline" and not card.supports_pipeline:
        fitting = [r for r in fitting if len(r) == 1]
        if not fitting:
            return PlacementError(400, f"Requested Pipeline sharding across {cmd.min_nodes}+ nodes but this model "
                                       f"does not support pipeline parallelism ({card.family} in mlx-lm): "
                                       f"{card.model_id}")
    if cmd.instance_meta == "MlxJaccl":
        return PlacementError(400, "Requested RDMA (MlxJaccl) but no RDMA-connected cycles available")
    smallest = min(len(r) for r in fitting)
    candidates = [r for r in fitting if len(r) == smallest]
    steady = [r for r in candidates if not state.restarting.keys() & set(r)]
    ring = max(steady or candidates, key=lambda r: (sum(rooms[n] for n in r), r))
    if len(ring) == 1:
        sharding = "Pipeline"
    if sharding == "Pipeline" and card.n_layers < len(ring):
        return PlacementError(400, f"{card.model_id} has {card.n_layers} layers, fewer than the "
                                   f"{len(ring)} nodes of the ring")
    return _instance(state, card, ring, sharding, new_id, chosen[ring])


ACCELERATORS = [None, Accelerator(kind="cpu", name="x86"), Accelerator(kind="metal", name="M2", memory_bytes=64 * GIB),
                Accelerator(kind="cuda", name="H100", memory_bytes=80 * GIB)]
ENGINE_SETS = [(), ("mlx",), ("mlx", "llama_cpp"), ("llama_cpp",)]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[State, PlaceInstance]:
    n = draw(st.integers(1, 8))
    ids = draw(st.lists(st.text("abcdef0123", min_size=1, max_size=3), min_size=n, max_size=n, unique=True))
    devices = draw(st.lists(st.sampled_from(ACCELERATORS[:2]) if draw(st.booleans()) else st.sampled_from(ACCELERATORS),
                            min_size=n, max_size=n))
    nodes = {}
    for node_id, acc in zip(ids, devices):
        total = draw(st.sampled_from([8, 16, 32, 64])) * GIB
        nodes[node_id] = NodeInfo(node_id=node_id, friendly_name=f"host-{node_id}", skulk_version="t",
                                  ram_total=total, ram_available=draw(st.sampled_from([1, 6, 12, 24, 48])) * GIB,
                                  when=0.0, accelerator=acc, engines=draw(st.sampled_from(ENGINE_SETS)))
    restarting = {i: 1e12 for i in draw(st.lists(st.sampled_from(ids), max_size=2))}
    excluded = tuple(draw(st.lists(st.sampled_from(ids), max_size=1)))
    card = ModelCard(model_id="o/m", storage_size_bytes=draw(st.sampled_from([1, 3, 8, 20, 40])) * GIB,
                     n_layers=draw(st.sampled_from([2, 3, 16, 32])), hidden_size=draw(st.sampled_from([4096, 960])),
                     num_key_value_heads=draw(st.sampled_from([None, 2, 3, 8])),
                     supports_tensor=draw(st.booleans()), context_length=8192,
                     family=draw(st.sampled_from(["qwen2", "llama"])), quantization="4bit",
                     supports_pipeline=draw(st.sampled_from([True, True, True, False])),
                     tasks=(draw(st.sampled_from([ModelTask.TEXT_GENERATION] * 9 + [ModelTask.TEXT_EMBEDDING])).value,),
                     engines=draw(st.sampled_from([("mlx",), ("mlx", "llama_cpp")])),
                     gguf_bytes=draw(st.sampled_from([0, 2 * GIB])))
    cmd = PlaceInstance(command_id="c", card=card, sharding=draw(st.sampled_from(["Pipeline", "Tensor"])),
                        instance_meta=draw(st.sampled_from(["MlxRing", "MlxRing", "MlxJaccl"])),
                        min_nodes=draw(st.sampled_from([1, 1, 2, 2, 3, 4])), excluded_nodes=excluded,
                        engine=draw(st.sampled_from(["auto", "auto", "mlx", "llama_cpp"])))
    return State(session="s", nodes=nodes, restarting=restarting), cmd


def counter() -> Callable[[], str]:
    count = itertools.count()
    return lambda: f"{next(count):032x}"


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_search_places_as_an_enumeration_of_every_ring_did(case: tuple[State, PlaceInstance]):
    state, cmd = case
    assert place(state, cmd, counter()) == exhaustive_place(state, cmd, counter())
