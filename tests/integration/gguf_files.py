"""GGUF files the tests make from the real model's: a copy with metadata added, as llama.cpp's own
`gguf_new_metadata` script writes one (the tensors unchanged)."""

from __future__ import annotations

from pathlib import Path

MEAN_POOLING = 1  # llama.cpp's LLAMA_POOLING_TYPE_MEAN


def with_pooling(src: Path, dest: Path, pooling: int = MEAN_POOLING) -> Path:
    """`src` as an embedding GGUF: `<arch>.pooling_type` set, so llama.cpp pools its last hidden
    states into one vector per input (how embedding GGUFs, e.g. Qwen3-Embedding's, say so)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata, get_field_data

    reader = gguf.GGUFReader(src, "r")
    arch = get_field_data(reader, gguf.Keys.General.ARCHITECTURE)
    writer = gguf.GGUFWriter(dest, arch=arch, endianess=reader.endianess)
    if (alignment := get_field_data(reader, gguf.Keys.General.ALIGNMENT)) is not None:
        writer.data_alignment = alignment
    copy_with_new_metadata(reader, writer, {f"{arch}.pooling_type": MetadataDetails(gguf.GGUFValueType.UINT32,
                                                                                     pooling)}, [])
    return dest
