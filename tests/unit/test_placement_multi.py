"""Multi-node placement (pure): rings, per-node memory, proportional layers, tensor checks."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from skulk.cluster.catalog import NodeCatalogUpdated, catalogs_pending
from skulk.cluster.placement import GIB, PlacementError, layer_split, place, ring_port
from skulk.cluster.reducer import apply
from skulk.cluster.state import IndexedEvent, NodeGatheredInfo, NodeInfo, State
from skulk.wire.commands import PlaceInstance
from skulk.wire.models import ModelCard

CARD = ModelCard(model_id="o/m", storage_size_bytes=8 * GIB, n_layers=32, hidden_size=4096,
                 num_key_value_heads=8, supports_tensor=True, context_length=32768,
                 family="qwen2", quantization="4bit")
_IDS = itertools.count()


def ids():
    return lambda: f"{next(_IDS):032x}"


def cluster(*nodes: tuple[str, int, int]) -> State:
    state = State(session="s")
    for i, (node_id, total_gb, avail_gb) in enumerate(nodes):
        info = NodeInfo(node_id=node_id, friendly_name=f"mac-{node_id}", skulk_version="t",
                        ram_total=total_gb * GIB, ram_available=avail_gb * GIB, when=0.0,
                        addresses=(f"10.0.0.{i + 1}",))
        state = apply(state, IndexedEvent(idx=i, session="s", event=NodeGatheredInfo(info=info)))
    return state


@pytest.mark.parametrize("n,weights,expected", [
    (32, [1, 1], [16, 16]), (32, [3, 1], [24, 8]), (4, [100, 1], [3, 1]), (5, [1, 1, 1], [2, 2, 1]),
    (3, [1, 1, 1], [1, 1, 1]),
])
def test_layer_split_is_proportional_with_at_least_one_layer(n, weights, expected):
    split = layer_split(n, weights)
    assert split == expected and sum(split) == n and min(split) >= 1


def test_smallest_fitting_ring_wins():
    state = cluster(("a", 64, 60), ("b", 64, 60), ("c", 16, 12))
    inst = place(state, PlaceInstance(command_id="c", card=CARD), ids())
    assert not isinstance(inst, PlacementError) and len(inst.node_to_runner) == 1
    assert set(inst.node_to_runner) <= {"a", "b"}


def test_a_node_restarting_in_place_is_passed_over_while_another_fits():
    state = cluster(("a", 64, 60), ("b", 32, 28))  # a has more room: it would win
    draining = replace(state, restarting={"a": 1e12})
    inst = place(draining, PlaceInstance(command_id="c", card=CARD), ids())
    assert not isinstance(inst, PlacementError) and set(inst.node_to_runner) == {"b"}
    alone = replace(cluster(("a", 64, 60)), restarting={"a": 1e12})  # no other node: placed there anyway
    inst = place(alone, PlaceInstance(command_id="c", card=CARD), ids())
    assert not isinstance(inst, PlacementError) and set(inst.node_to_runner) == {"a"}


def test_memory_is_checked_per_node_never_summed():
    big = replace(CARD, storage_size_bytes=20 * GIB)
    state = cluster(("a", 24, 20), ("b", 24, 20))  # 40 GB free in all, 18 GB usable each
    got = place(state, PlaceInstance(command_id="c", card=big), ids())
    assert not isinstance(got, PlacementError) and len(got.node_to_runner) == 2  # 10 GB share each fits
    too_big = replace(CARD, storage_size_bytes=30 * GIB)
    got = place(state, PlaceInstance(command_id="c", card=too_big), ids())
    assert isinstance(got, PlacementError) and got.status == 400
    assert "needs ~" in got.message and "can use 18.0GB" in got.message


def test_pipeline_layers_follow_usable_memory_in_mlx_rank_order():
    state = cluster(("a", 64, 48), ("b", 64, 16))
    inst = place(state, PlaceInstance(command_id="c", card=replace(CARD, storage_size_bytes=30 * GIB),
                                      min_nodes=2), ids())
    assert not isinstance(inst, PlacementError)
    by_node = {n: inst.runner_to_shard[r] for n, r in inst.node_to_runner.items()}
    a, b = by_node["a"], by_node["b"]
    assert (a.device_rank, b.device_rank) == (0, 1)
    assert a.end_layer - a.start_layer == 24 and b.end_layer - b.start_layer == 8
    assert (b.start_layer, b.end_layer, a.start_layer, a.end_layer) == (0, 8, 8, 32)  # rank 0 runs the last layers
    assert inst.ring_hosts == (f"10.0.0.1:{ring_port(inst.instance_id, 0)}",
                               f"10.0.0.2:{ring_port(inst.instance_id, 1)}")


def test_tensor_divisibility_and_support():
    state = cluster(("a", 64, 60), ("b", 64, 60), ("c", 64, 60))
    odd = replace(CARD, num_key_value_heads=2)
    got = place(state, PlaceInstance(command_id="c", card=odd, sharding="Tensor", min_nodes=3), ids())
    assert isinstance(got, PlacementError) and "No tensor sharding found" in got.message
    got = place(state, PlaceInstance(command_id="c", card=CARD, sharding="Tensor", min_nodes=2), ids())
    assert not isinstance(got, PlacementError)
    assert {s.kind for s in got.runner_to_shard.values()} == {"Tensor"}
    assert {(s.start_layer, s.end_layer) for s in got.runner_to_shard.values()} == {(0, 32)}


def test_the_llama_layout_splits_by_whole_head_groups_up_to_its_kv_heads():
    """SmolLM2's shape: 3 key-value heads split 2 + 1 over two ranks; four ranks would leave one
    without a head."""
    state = cluster(("a", 64, 60), ("b", 64, 60), ("c", 64, 60), ("d", 64, 60))
    smol = replace(CARD, family="llama", num_key_value_heads=3, hidden_size=576)
    for width, fits in ((2, True), (3, True), (4, False)):
        got = place(state, PlaceInstance(command_id="c", card=smol, sharding="Tensor", min_nodes=width), ids())
        assert isinstance(got, PlacementError) != fits, (width, got)
    two = cluster(("a", 64, 60), ("b", 64, 60))  # mlx-lm's own shard: the heads must divide
    got = place(two, PlaceInstance(command_id="c", card=replace(smol, family="qwen2"), sharding="Tensor",
                                   min_nodes=2), ids())
    assert isinstance(got, PlacementError) and "num_key_value_heads=3" in got.message


def test_exclusions_unknown_ids_are_ignored():
    state = cluster(("a", 64, 60), ("b", 64, 60))
    got = place(state, PlaceInstance(command_id="c", card=CARD, excluded_nodes=("a", "ghost")), ids())
    assert not isinstance(got, PlacementError) and set(got.node_to_runner) == {"b"}
    got = place(state, PlaceInstance(command_id="c", card=CARD, min_nodes=2, excluded_nodes=("a",)), ids())
    assert isinstance(got, PlacementError) and "(1 node(s) excluded)" in got.message


def test_a_model_no_store_has_is_placed_only_on_the_nodes_that_hold_it():

    state = cluster(("a", 64, 48), ("b", 64, 48), ("c", 64, 48))
    on_b = replace(state, catalog={"b": NodeCatalogUpdated(node_id="b", cards=(CARD,)),
                                   "a": NodeCatalogUpdated(node_id="a", cards=()),
                                   "c": NodeCatalogUpdated(node_id="c", cards=())})
    placed = place(on_b, PlaceInstance(command_id="x", card=CARD), ids())
    assert not isinstance(placed, PlacementError) and set(placed.node_to_runner) == {"b"}
    refused = place(on_b, PlaceInstance(command_id="x", card=CARD, min_nodes=2), ids())
    assert isinstance(refused, PlacementError)
    assert refused.message.startswith("o/m is not in the models dir of node(s) a, c")
    unreported = replace(on_b, catalog={"b": on_b.catalog["b"]})  # a and c have not said yet: not ruled out
    assert not isinstance(place(unreported, PlaceInstance(command_id="x", card=CARD, min_nodes=3), ids()),
                          PlacementError)
    in_store = replace(on_b, catalog={**on_b.catalog, "a#store": NodeCatalogUpdated(
        node_id="a", cards=(CARD,), in_store=True)})
    anywhere = place(in_store, PlaceInstance(command_id="x", card=CARD, min_nodes=3), ids())
    assert not isinstance(anywhere, PlacementError) and len(anywhere.node_to_runner) == 3


def test_placement_counts_what_a_runner_holds_not_the_files_size():
    """A 4-bit checkpoint of 5 GB files holds 30 GB in a CPU runner (every parameter in fp32)."""
    small_file = replace(CARD, storage_size_bytes=5 * GIB, runtime_bytes=30 * GIB)
    state = cluster(("a", 24, 20))  # 18 GB usable: the files would fit, the runner would not
    got = place(state, PlaceInstance(command_id="c", card=small_file), ids())
    assert isinstance(got, PlacementError) and "30.0GB of weights" in got.message
    assert not isinstance(place(state, PlaceInstance(command_id="c", card=replace(small_file, runtime_bytes=0)),
                                ids()), PlacementError)  # unknown: the files' size, as before


def test_a_family_nobody_can_pipeline_runs_on_one_node_or_is_refused_by_name():
    """phi3 has no `pipeline` in mlx-lm and no split of the runner's own: a split would crash
    every runner at load."""
    llama = replace(CARD, family="phi3", supports_pipeline=False, storage_size_bytes=20 * GIB)
    two = cluster(("a", 24, 20), ("b", 24, 20))  # fits only split across both
    got = place(two, PlaceInstance(command_id="c", card=llama), ids())
    assert isinstance(got, PlacementError) and "does not support pipeline parallelism (phi3" in got.message
    small = replace(llama, storage_size_bytes=4 * GIB)
    got = place(two, PlaceInstance(command_id="c", card=small), ids())
    assert not isinstance(got, PlacementError) and len(got.node_to_runner) == 1
    got = place(two, PlaceInstance(command_id="c", card=small, min_nodes=2), ids())
    assert isinstance(got, PlacementError) and "pipeline parallelism" in got.message


def test_a_gpu_node_holds_the_checkpoint_as_stored_and_is_sized_by_its_own_memory():
    """A 4-bit 8B checkpoint: 4.5 GB on a GPU (kept quantized unless bf16 fits at load), 32 GB
    in fp32 on a CPU node; a CUDA node may fill 90 % of its GPU, whatever its RAM."""
    from skulk.cluster.placement import held, shares, usable
    from skulk.wire.accelerator import Accelerator

    card = replace(CARD, storage_size_bytes=int(4.5 * GIB), runtime_bytes=32 * GIB)
    state = cluster(("gpu", 16, 8), ("cpu", 64, 60))
    gpu = replace(state.nodes["gpu"], accelerator=Accelerator(kind="cuda", name="NVIDIA H100", memory_bytes=80 * GIB))
    state = replace(state, nodes={**state.nodes, "gpu": gpu})
    assert held(card, state.nodes["gpu"]) == int(4.5 * GIB) and held(card, state.nodes["cpu"]) == 32 * GIB
    assert usable(state.nodes["gpu"]) == int(0.9 * 80 * GIB)
    assert shares(card, ("gpu", "cpu"), state, "Tensor") == [int(2.25 * GIB), 16 * GIB]
    got = place(state, PlaceInstance(command_id="c", card=card, excluded_nodes=("cpu",)), ids())
    assert not isinstance(got, PlacementError) and list(got.node_to_runner) == ["gpu"]  # 8 GB of RAM: fits its GPU


def test_a_cuda_gpu_counts_what_is_already_placed_on_it_and_rings_never_mix_devices():
    from skulk.cluster.placement import room
    from skulk.wire.accelerator import Accelerator

    card = replace(CARD, storage_size_bytes=30 * GIB, runtime_bytes=120 * GIB)
    state = cluster(("g1", 256, 250), ("g2", 256, 250))
    gpu = Accelerator(kind="cuda", name="NVIDIA H100", memory_bytes=80 * GIB)
    state = replace(state, nodes={n: replace(i, accelerator=gpu) for n, i in state.nodes.items()})
    first = place(state, PlaceInstance(command_id="c", card=card), ids())
    assert not isinstance(first, PlacementError) and len(first.node_to_runner) == 1
    (where,) = first.node_to_runner
    state = replace(state, instances={first.instance_id: first})
    assert room(state, where) == int(0.9 * 80 * GIB) - 30 * GIB  # the GPU's memory is read once
    second = place(state, PlaceInstance(command_id="c", card=replace(card, model_id="o/m2")), ids())
    assert not isinstance(second, PlacementError) and list(second.node_to_runner) != [where]

    mixed = replace(state, instances={}, nodes={**state.nodes, "g2": replace(state.nodes["g2"], accelerator=None)})
    got = place(mixed, PlaceInstance(command_id="c", card=card, min_nodes=2), ids())
    assert isinstance(got, PlacementError) and "computes on one kind of device (cpu on mac-g2, cuda on mac-g1)" \
        in got.message, got


def test_a_one_node_instance_counts_the_drafter_its_card_names():
    from skulk.cluster.catalog import NodeCatalogUpdated, catalog_key
    from skulk.cluster.placement import drafter_bytes

    card = replace(CARD, storage_size_bytes=10 * GIB, drafter="o/small")
    small = replace(CARD, model_id="o/small", storage_size_bytes=2 * GIB)
    entry = NodeCatalogUpdated(node_id="a", cards=(card, small))
    state = replace(cluster(("a", 64, 60)), catalog={catalog_key(entry): entry})
    assert drafter_bytes(state, card, state.nodes["a"], 1) == 2 * GIB
    assert drafter_bytes(state, card, state.nodes["a"], 2) == 0  # sharded: no speculation
    assert drafter_bytes(state, replace(card, drafter="o/unknown"), state.nodes["a"], 1) == 0
    tight = replace(cluster(("a", 22, 22)), catalog=state.catalog)  # 16.5 GB usable: 10 GB fits, 10 + 2 not
    assert isinstance(place(tight, PlaceInstance(command_id="c", card=card), ids()), PlacementError)
    assert not isinstance(place(tight, PlaceInstance(command_id="c", card=replace(card, drafter="")), ids()),
                          PlacementError)


def test_a_model_lookup_is_pending_while_a_node_or_a_member_has_not_reported_its_models():
    state = cluster(("a", 64, 60), ("b", 64, 60))
    assert catalogs_pending(state, members=2) == ["mac-a", "mac-b"]
    state = replace(state, catalog={"a": NodeCatalogUpdated(node_id="a", cards=())})
    assert catalogs_pending(state, members=2) == ["mac-b"]
    assert catalogs_pending(state, members=3) == ["mac-b", "1 more"]  # gossip knows a node the state does not
    state = replace(state, catalog={**state.catalog, "store": NodeCatalogUpdated(node_id="b", cards=(),
                                                                                  in_store=True)})
    assert catalogs_pending(state, members=2) == []  # only now is a missing model a 404
