"""Forming this runner's `mx.distributed` ring and loading its part of the model.

`mlx` is imported only inside these functions, after `blas.preload_blas()` ran.
"""

from __future__ import annotations

import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skulk.node import exitcodes
from skulk.node.addresses import machine_addresses
from skulk.node.model_cards import LLAMA_LAYOUT
from skulk.services.runner import blas, fp32_cache, llama_split
from skulk.services.runner.cpu_linear import blas_threads
from skulk.services.runner.deadline import Deadline
from skulk.services.runner.quant_path import QuantMode
from skulk.wire.accelerator import gather


@dataclass(frozen=True, slots=True)
class Ring:
    """This runner's place in an mx.distributed ring (from the placement)."""

    rank: int
    hosts: tuple[str, ...]
    sharding: str  # "Pipeline" | "Tensor"
    split: tuple[int, ...]  # layers per rank (Pipeline)
    hostfile: Path
    connect_deadline_s: float = 120.0


def connect_group(ring: Ring) -> Any:
    """`mx.distributed.init(backend="ring")` under SKULK_GROUP_CONNECT_DEADLINE_SECONDS.

    The call blocks in C until every rank has connected; on overrun the `Deadline` logs a
    CRITICAL diagnosis and exits the process (the supervisor then reports the runner failed).
    """
    import mlx.core as mx

    host, _, port = ring.hosts[ring.rank].rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:  # fail now, not at the deadline: the leader re-creates the instance on new ports
            probe.bind((host, int(port)))
        except OSError as exc:
            raise RuntimeError(f"ring port {host}:{port} of rank {ring.rank} is taken ({exc.strerror})") from None
    ring.hostfile.write_text(json.dumps([[h] for h in ring.hosts]))
    os.environ["MLX_HOSTFILE"] = str(ring.hostfile)
    os.environ["MLX_RANK"] = str(ring.rank)

    with Deadline(ring.connect_deadline_s, f"rank {ring.rank} forming its mx.distributed ring with "
                  f"{', '.join(ring.hosts)} (SKULK_GROUP_CONNECT_DEADLINE_SECONDS)",
                  "a peer rank is down, or its port is unreachable or taken: check the peers' "
                  "runner logs and firewalls", exitcodes.GROUP_CONNECT_FAILED):
        return mx.distributed.init(backend="ring", strict=True)


def use_device(accel: str = "") -> str:
    """Point mlx at the device this node was set to use (`accel`: the node's `SKULK_ACCEL`; cpu keeps a GPU machine on
    the CPU) and say which it is, for the runner's log."""
    import mlx.core as mx

    acc = gather(forced=accel)
    if accel.strip().lower() == "cpu":
        mx.set_default_device(mx.cpu)
    if mx.default_device() == mx.cpu:
        return f"CPU ({acc.name})" + (f"; {acc.note}" if acc.note else "")
    if acc.kind in ("cuda", "metal"):
        return (f"{'CUDA' if acc.kind == 'cuda' else 'Metal'} ({acc.name}, {acc.memory_bytes / 2**30:.1f} GiB)"
                + (f"; {acc.note}" if acc.note else ""))
    return f"GPU ({mx.default_device()})"


def load_model(model_dir: Path, ring: Ring | None, max_batch: int = 16,
               quant_mode: QuantMode = QuantMode.AUTO) -> tuple[Any, Any, str]:
    """(model, tokenizer, engine path) for this runner: the whole model, or its shard. A quantized
    model on a GPU is served quantized or as a bf16 copy, whichever decodes faster (`gpu_load`)."""
    import mlx.core as mx

    if ring is not None and len(ring.hosts) > 1:
        return _load_sharded(model_dir, ring)
    from mlx_lm.utils import dequantize_model, load_config, load_tokenizer
    from mlx_lm.utils import load_model as mlx_load_model

    eos = load_config(model_dir).get("eos_token_id")  # mlx-lm's `load`, with the tokenizer beside the weights
    beside = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")
    tokenizing = beside.submit(load_tokenizer, model_dir, None, eos_token_ids=eos)
    beside.shutdown(wait=False)  # the one task runs on; `result()` below waits for it
    model, config = mlx_load_model(model_dir)
    if mx.default_device() == mx.cpu:
        # Quantized matmuls are very slow on CPU: dequantize and run fp32 (4 B/param), computed
        # once and kept beside the model (`fp32_cache`).
        kept = False
        if quantized(config):
            model = dequantize_model(model)
            kept = fp32_cache.load(model_dir, model)
        model.set_dtype(mx.float32)
        path = "cpu fp32" + (" (dequantized" + (", kept copy)" if kept else ")") if quantized(config) else "")
        if quantized(config) and not kept:
            mx.eval(model.parameters())
            fp32_cache.save(model_dir, model)
    else:
        mx.eval(model.parameters())
        path = f"{mx.default_device()}"
        if quantized(config):
            from skulk.services.runner.gpu_load import pick

            model, how = pick(model_dir, model, config, max_batch, quant_mode)
            path += f" {how}"
    mx.eval(model.parameters())
    return model, tokenizing.result(), path


def _load_sharded(model_dir: Path, ring: Ring) -> tuple[Any, Any, str]:
    """mlx-lm's sharded load for a local directory, with the placement's layer split."""
    import mlx.core as mx
    from mlx_lm.utils import load_model as mlx_load_model
    from mlx_lm.utils import load_tokenizer

    group = connect_group(ring)
    shared = _share_cores(ring) if mx.default_device() == mx.cpu else ""
    model, config = mlx_load_model(model_dir, lazy=True, strict=False)
    tokenizer = load_tokenizer(model_dir, {"trust_remote_code": True},
                               eos_token_ids=config.get("eos_token_id"))
    layer = model.model.layers[0] if config.get("model_type") in LLAMA_LAYOUT else None
    own_tensor = ring.sharding == "Tensor" and layer is not None and not llama_split.divides(layer, group.size())
    # Plain Linear layers before the split: as one node does on the CPU (fp32), and on any device
    # where the runner's own tensor split slices weights (it cannot slice packed quantized ones).
    dequantized = quantized(config) and (mx.default_device() == mx.cpu or own_tensor)
    kept = False
    if dequantized:
        from mlx_lm.utils import dequantize_model

        model = dequantize_model(model)  # lazy: nothing is computed until the shard's eval
        if mx.default_device() == mx.cpu:  # the whole model's fp32 copy, where a runner kept one, read
            kept = fp32_cache.load(model_dir, model)  # instead of computed (lazily: a Pipeline rank its layers)
        else:
            model.set_dtype(mx.bfloat16)
    if own_tensor:
        llama_split.tensor(model.model, group)  # mlx-lm's shard needs the heads and MLP to divide
    elif ring.sharding == "Tensor":
        model.shard(group)
    elif hasattr(model.model, "pipeline"):
        model.model.pipeline(group, split=list(ring.split))
    else:
        llama_split.pipeline(model.model, group, list(ring.split))
    if mx.default_device() == mx.cpu:
        model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))  # every rank loaded
    path = f"{ring.sharding} rank {ring.rank}/{len(ring.hosts)} " + (
        "cpu fp32" + (" (dequantized" + (", kept copy)" if kept else ")") if dequantized else "")
        if mx.default_device() == mx.cpu
        else str(mx.default_device())) + shared
    return model, tokenizer, path


def _share_cores(ring: Ring) -> str:
    """The rank's BLAS threads where other ranks of its ring run on this machine (`blas`); what
    the engine path says of it ("" where nothing was set)."""
    threads = blas.threads_beside_ranks(blas.usable_cores(), ring.hosts, ring.rank, machine_addresses(),
                                        blas_threads())
    if threads is None:
        return ""
    if not blas.set_threads(threads):
        return ", ranks share this machine but OpenBLAS's threads could not be set (not preloaded)"
    return f", {threads} BLAS thread(s): ranks share this machine"


def quantized(config: dict[str, Any]) -> bool:
    return bool(config.get("quantization") or config.get("quantization_config"))
