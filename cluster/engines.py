"""Which engine runs an instance on a ring of nodes (pure), and what it holds there.

A card lists the engines that can run its checkpoint (MLX for an MLX directory, llama.cpp where
the directory keeps a GGUF file); a node lists the engines it has (llama.cpp where its binding
is installed, narrowed by its `runner.engine`). The fastest one that all of the ring has wins:
MLX on a GPU (Metal, CUDA), llama.cpp on a CPU, where MLX's kernels are several times slower
(no fast quantized matmul: MLX dequantizes to fp32). llama.cpp runs on one node only (its RPC
backend is not used: it is unauthenticated), so a wider ring is MLX's. `PlaceInstance.engine`
asks for one engine; a ring that cannot give it is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skulk.cluster.state import NodeInfo
from skulk.wire.models import EngineKind, ModelCard

AUTO = "auto"
LLAMA_KV_TOKENS = 16384
"""The llama.cpp runner's KV cache, in tokens, for all its requests together (its
`KV_TOKENS`): what placement counts beside the GGUF weights."""
LLAMA_EMBED_TOKENS = 8192
"""The context of a llama.cpp embedding runner (`llamacpp/embed.py`'s `CONTEXT`, at most)."""


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


def kind_of(name: str) -> EngineKind:
    """An instance's engine as a kind (one a newer node named and this one does not know counts as MLX)."""
    return EngineKind(name) if name in EngineKind._value2member_map_ else EngineKind.MLX


def node_engines(node: NodeInfo) -> tuple[str, ...]:
    """The engines a node has (a node from before engines were reported has MLX only)."""
    return node.engines or (EngineKind.MLX.value,)


def on_cpu(node: NodeInfo) -> bool:
    return node.accelerator is None or node.accelerator.kind == "cpu"


def choose(card: ModelCard, ring: Sequence[NodeInfo], asked: str = AUTO) -> EngineKind | Refused:
    """The engine for `card` on `ring` (`asked`: auto, mlx or llama_cpp)."""
    if asked not in (AUTO, *EngineKind):
        return Refused(f"unknown engine {asked!r} (auto, {', '.join(EngineKind)})")
    names = ", ".join(n.friendly_name for n in ring)
    usable = [e for e in EngineKind if e in card.engines and all(e in node_engines(n) for n in ring)]
    if len(ring) > 1:
        usable = [e for e in usable if e is not EngineKind.LLAMA_CPP]
    if asked != AUTO:
        if EngineKind(asked) in usable:
            return EngineKind(asked)
        return Refused(_why_not(card, ring, EngineKind(asked), names))
    if not usable:
        have = "; ".join(n.friendly_name + " has " + ", ".join(node_engines(n)) for n in ring)
        return Refused(f"no engine runs {card.model_id} ({', '.join(card.engines) or 'none'}) on [{names}] "
                       f"({have})" + (": llama.cpp runs on one node only" if len(ring) > 1 else ""))
    if EngineKind.LLAMA_CPP in usable and (all(on_cpu(n) for n in ring) or EngineKind.MLX not in usable):
        return EngineKind.LLAMA_CPP
    return EngineKind.MLX if EngineKind.MLX in usable else usable[0]


def _why_not(card: ModelCard, ring: Sequence[NodeInfo], engine: EngineKind, names: str) -> str:
    if engine not in card.engines:
        what = "no GGUF file" if engine is EngineKind.LLAMA_CPP else "no MLX weights"
        return f"{card.model_id} cannot run on {engine}: its directory has {what}"
    lacking = [n.friendly_name for n in ring if engine not in node_engines(n)]
    if lacking:
        return f"engine {engine} is not available on {', '.join(lacking)}"
    return f"engine {engine} runs on one node only, not across [{names}] (min_nodes=1)"


def weights_held(card: ModelCard, engine: EngineKind, gpu: bool) -> int:
    """The weights a runner of `engine` holds: llama.cpp the GGUF as stored; MLX on a GPU the
    checkpoint as stored, on the CPU every parameter in fp32."""
    if engine is EngineKind.LLAMA_CPP:
        return card.gguf_bytes or card.storage_size_bytes
    return card.storage_size_bytes if gpu else card.memory_bytes


def kv_tokens(engine: EngineKind, default: int, embedding: bool = False) -> int:
    """The KV cache's tokens placement reserves for one instance of `engine`."""
    if engine is EngineKind.LLAMA_CPP:
        return LLAMA_EMBED_TOKENS if embedding else LLAMA_KV_TOKENS
    return default
