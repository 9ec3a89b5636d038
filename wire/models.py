"""Model cards on the wire: what a model is (layers, size, family, tasks, companions) as the
catalog, placement and routing see it. Model directories are read into cards by
`node/model_cards.py` (the store role for the catalog, the API for its own node's models at
start, `skulk model add`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from skulk.wire.message import Message


class ModelTask(StrEnum):
    """What a model serves (upstream's card `tasks`): routes and runners decide on this."""

    TEXT_GENERATION = "TextGeneration"
    TEXT_EMBEDDING = "TextEmbedding"


class EngineKind(StrEnum):
    """What computes an instance's tokens (one engine per instance, every rank alike)."""

    MLX = "mlx"  # mlx-lm: Metal, CUDA or the CPU; shards across nodes
    LLAMA_CPP = "llama_cpp"  # llama.cpp on a GGUF file: one node, its CPU (or its GPU where built for one)


GGUF_FILE = "model.gguf"
"""The GGUF checkpoint an imported model directory keeps (llama.cpp runs it), beside its MLX weights
where mlx can read the file, alone where it cannot."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCard(Message):
    TYPE: ClassVar[str] = "model.card"
    model_id: str
    storage_size_bytes: int
    n_layers: int
    hidden_size: int
    num_key_value_heads: int | None
    supports_tensor: bool
    context_length: int
    family: str
    quantization: str
    tasks: tuple[str, ...] = (ModelTask.TEXT_GENERATION.value,)
    companions: tuple[str, ...] = ()  # models staged with this one, in use while it is (a drafter, ...)
    supports_pipeline: bool = True  # mlx-lm can split its layers across nodes (`model.pipeline`)
    drafter: str = ""  # the companion that drafts for it (`skulk.json` runtime.assistant_model_repo)
    runtime_bytes: int = 0
    """What a runner on the CPU path holds for the weights: every parameter in fp32 (a quantized
    model is dequantized at load), counted from the safetensors headers (a GGUF-only model: the
    file's size, what llama.cpp holds); 0: unknown, take the files' size."""
    engines: tuple[str, ...] = (EngineKind.MLX.value,)  # EngineKinds that can run the checkpoint
    gguf_bytes: int = 0  # the GGUF file's size (what llama.cpp holds for the weights); 0: none

    @property
    def memory_bytes(self) -> int:
        """The weights' memory in a runner, for placement's arithmetic and previews."""
        return self.runtime_bytes or self.storage_size_bytes

    @property
    def is_embedding(self) -> bool:
        return ModelTask.TEXT_EMBEDDING in self.tasks


class ModelDirError(ValueError):
    """A directory under the models dir that is not a usable model (says why)."""


def dir_name(model_id: str) -> str:
    """`org/name` -> `org--name` (the on-disk name)."""
    if model_id.count("/") != 1 or ".." in model_id or model_id.startswith("/"):
        raise ModelDirError(f"model id {model_id!r} is not of the form org/name")
    return model_id.replace("/", "--")
