"""Which engine an instance runs on (pure): the card's engines, the nodes', the device, the width,
what was asked; and what placement counts for it."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from skulk.cluster.engines import Refused, choose, weights_held
from skulk.cluster.placement import GIB, PlacementError, place
from skulk.cluster.reducer import apply
from skulk.cluster.state import IndexedEvent, NodeGatheredInfo, NodeInfo, State
from skulk.wire.accelerator import Accelerator
from skulk.wire.commands import PlaceInstance
from skulk.wire.engines import engines_here
from skulk.wire.models import EngineKind, ModelCard

MLX, LLAMA = EngineKind.MLX, EngineKind.LLAMA_CPP
CARD = ModelCard(model_id="o/m", storage_size_bytes=2 * GIB, runtime_bytes=16 * GIB, n_layers=32,
                 hidden_size=4096, num_key_value_heads=8, supports_tensor=True, context_length=32768,
                 family="llama", quantization="4bit", engines=(MLX.value, LLAMA.value), gguf_bytes=2 * GIB)
MLX_ONLY = replace(CARD, engines=(MLX.value,), gguf_bytes=0)
_IDS = itertools.count()


def node(node_id: str, kind: str = "cpu", engines: tuple[str, ...] = (MLX.value, LLAMA.value),
         ram_gb: int = 64) -> NodeInfo:
    acc = Accelerator(kind=kind, name=kind, memory_bytes=ram_gb * GIB if kind != "cpu" else 0)
    return NodeInfo(node_id=node_id, friendly_name=f"box-{node_id}", skulk_version="t", ram_total=ram_gb * GIB,
                    ram_available=ram_gb * GIB, when=0.0, addresses=("10.0.0.1",), accelerator=acc, engines=engines)


def cluster(*nodes: NodeInfo) -> State:
    state = State(session="s")
    for i, info in enumerate(nodes):
        state = apply(state, IndexedEvent(idx=i, session="s", event=NodeGatheredInfo(info=info)))
    return state


def ids():
    return lambda: f"{next(_IDS):032x}"


@pytest.mark.parametrize("kind,expected", [("cpu", LLAMA), ("metal", MLX), ("cuda", MLX)])
def test_auto_picks_llama_cpp_on_a_cpu_and_mlx_on_a_gpu(kind, expected):
    assert choose(CARD, [node("a", kind)]) is expected


def test_auto_falls_back_to_what_the_card_and_the_node_have():
    assert choose(MLX_ONLY, [node("a")]) is MLX  # no GGUF file
    assert choose(CARD, [node("a", engines=(MLX.value,))]) is MLX  # no llama.cpp binding on the node
    assert choose(replace(CARD, engines=(LLAMA.value,)), [node("a", "metal")]) is LLAMA  # GGUF only
    assert choose(CARD, [node("a", engines=())]) is MLX  # an older node reports nothing: MLX


def test_a_ring_never_runs_llama_cpp_and_says_why_when_asked():
    ring = [node("a"), node("b")]
    assert choose(CARD, ring) is MLX
    refused = choose(CARD, ring, LLAMA.value)
    assert isinstance(refused, Refused) and "one node only" in refused.reason
    refused = choose(replace(CARD, engines=(LLAMA.value,)), ring)
    assert isinstance(refused, Refused) and "one node only" in refused.reason


def test_an_engine_asked_for_is_given_or_refused_with_the_reason():
    assert choose(CARD, [node("a")], MLX.value) is MLX
    assert choose(CARD, [node("a", "metal")], LLAMA.value) is LLAMA
    refused = choose(MLX_ONLY, [node("a")], LLAMA.value)
    assert isinstance(refused, Refused) and "no GGUF file" in refused.reason
    refused = choose(CARD, [node("a", engines=(MLX.value,))], LLAMA.value)
    assert isinstance(refused, Refused) and "not available on box-a" in refused.reason
    refused = choose(CARD, [node("a")], "vllm")
    assert isinstance(refused, Refused) and "unknown engine" in refused.reason


def test_a_node_offers_what_is_installed_or_what_its_config_names():
    assert MLX.value in engines_here("auto")
    assert engines_here("mlx") == (MLX.value,)
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is not None:  # make setup builds it: the usual case
        assert engines_here("llama_cpp") == (LLAMA.value,)
    refused = choose(CARD, [node("a", engines=("llama_cpp (not installed)",))], LLAMA.value)
    assert isinstance(refused, Refused) and "not available on box-a" in refused.reason
    assert choose(CARD, [node("a", engines=("llama_cpp (not installed)",))]) == Refused(
        "no engine runs o/m (mlx, llama_cpp) on [box-a] (box-a has llama_cpp (not installed))")


def test_llama_cpp_holds_the_gguf_file_not_an_fp32_copy():
    assert weights_held(CARD, LLAMA, gpu=False) == 2 * GIB
    assert weights_held(CARD, MLX, gpu=False) == 16 * GIB and weights_held(CARD, MLX, gpu=True) == 2 * GIB


def test_placement_records_the_engine_and_counts_its_memory():
    small = cluster(node("a", ram_gb=12))  # 16 GB of fp32 weights cannot fit; the 2 GB file can
    inst = place(small, PlaceInstance(command_id="c", card=CARD), ids())
    assert not isinstance(inst, PlacementError) and inst.engine == LLAMA.value
    refused = place(small, PlaceInstance(command_id="c", card=CARD, engine=MLX.value), ids())
    assert isinstance(refused, PlacementError) and "16.0GB" in refused.message
    gpu = place(cluster(node("a", "metal")), PlaceInstance(command_id="c", card=CARD), ids())
    assert not isinstance(gpu, PlacementError) and gpu.engine == MLX.value


def test_placement_refuses_llama_cpp_across_nodes_with_the_reason():
    two = cluster(node("a"), node("b"))
    refused = place(two, PlaceInstance(command_id="c", card=CARD, min_nodes=2, engine=LLAMA.value), ids())
    assert isinstance(refused, PlacementError) and "one node only" in refused.message
    wide = place(two, PlaceInstance(command_id="c", card=CARD, min_nodes=2), ids())
    assert not isinstance(wide, PlacementError) and wide.engine == MLX.value and len(wide.node_to_runner) == 2


def test_an_embedding_gguf_goes_to_llama_cpp_on_a_cpu_with_its_smaller_context():
    from skulk.cluster.engines import LLAMA_EMBED_TOKENS, LLAMA_KV_TOKENS, kv_tokens
    from skulk.wire.models import ModelTask

    embed = replace(CARD, tasks=(ModelTask.TEXT_EMBEDDING.value,))
    assert choose(embed, [node("a")]) is LLAMA and choose(embed, [node("a", "metal")]) is MLX
    assert kv_tokens(LLAMA, 4096, embedding=True) == LLAMA_EMBED_TOKENS < kv_tokens(LLAMA, 4096) == LLAMA_KV_TOKENS
    inst = place(cluster(node("a")), PlaceInstance(command_id="c", card=embed), ids())
    assert not isinstance(inst, PlacementError) and inst.engine == LLAMA.value
