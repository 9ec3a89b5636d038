"""What a node computes on: the CPU, an NVIDIA GPU through mlx's CUDA backend, or Apple's GPU
through Metal. `choose` decides from facts (pure); `gather` reads them on this machine without
importing mlx (the gossip role reports it in `NodeInfo`, every node's `/state` shows it).

`SKULK_ACCEL=cpu|cuda` forces one: `cpu` keeps mlx on the CPU even where a GPU is present (the
runner sets mlx's default device), `cuda` where no usable GPU is found is reported with a note,
not silently turned into the CPU.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from functools import cache
from typing import ClassVar, Literal

from skulk.wire.message import Message

Kind = Literal["cpu", "cuda", "metal"]
NVIDIA_SMI_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator(Message):
    TYPE: ClassVar[str] = "state.accelerator"
    kind: str  # Kind
    name: str  # "NVIDIA H200", "Apple M2 Max", the CPU's model name
    memory_bytes: int = 0  # the GPU's own memory (Metal: the unified RAM); 0 on the CPU
    count: int = 1  # GPUs seen (mlx uses the first)
    backend: str = ""  # the mlx package that drives it ("mlx-cuda-13", "mlx-metal", "mlx-cpu")
    note: str = ""  # why it is not what was asked for, or what is wrong with the install


def choose(forced: str, system: str, machine: str, cuda_package: str, gpus: list[tuple[str, int]],
           cpu_name: str, ram_bytes: int, cpu_package: str = "") -> Accelerator:
    """The accelerator mlx will use here, from the facts (`gpus`: name and bytes per NVIDIA GPU)."""
    cpu = Accelerator(kind="cpu", name=cpu_name or machine, backend=cpu_package)
    forced = forced.strip().lower()
    if forced not in ("", "cpu", "cuda"):
        return Accelerator(kind="cpu", name=cpu.name, backend=cpu_package,
                           note=f"SKULK_ACCEL={forced!r} is not cpu or cuda: the CPU is used")
    if forced == "cpu":
        return cpu
    if system == "Darwin" and machine == "arm64":
        return Accelerator(kind="metal", name=cpu_name or "Apple silicon", memory_bytes=ram_bytes,
                           backend="mlx-metal")
    if cuda_package and gpus:
        note = (f"{cpu_package} is installed beside {cuda_package}: its library may shadow the CUDA one "
                f"(pip uninstall {cpu_package}, then reinstall {cuda_package})") if cpu_package else ""
        return Accelerator(kind="cuda", name=gpus[0][0], memory_bytes=gpus[0][1], count=len(gpus),
                           backend=cuda_package, note=note)
    if forced == "cuda" or gpus:
        missing = ("no NVIDIA GPU answered nvidia-smi" if not gpus else
                   "mlx's CUDA backend is not installed (pip install 'skulk[cuda]', or make run on this machine)")
        return Accelerator(kind="cpu", name=cpu.name, backend=cpu_package, note=f"CUDA not used: {missing}")
    return cpu


def _package(prefix: str) -> str:
    import importlib.metadata  # here, not at the top: every role imports this module, few call this

    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(prefix):
            return name
    return ""


def nvidia_smi(*fields: str) -> list[list[str]]:
    """One row of `fields` per NVIDIA GPU, as nvidia-smi reports them ([] where it cannot answer)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[v.strip() for v in line.rsplit(",", len(fields) - 1)] for line in out.splitlines() if line.strip()]


def _nvidia_gpus() -> list[tuple[str, int]]:
    return [(name, int(mib) * 2**20) for name, mib in nvidia_smi("name", "memory.total") if name and mib.isdigit()]


def _cpu_name(system: str) -> str:
    if system == "Darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=2, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@cache
def gather(ram_bytes: int = 0, forced: str = "") -> Accelerator:
    """This machine's accelerator (read once per process: nvidia-smi is not asked every beat);
    `forced`: the node's `SKULK_ACCEL` (cpu|cuda), given to the role as an argument."""
    system, machine = platform.system(), platform.machine()
    cuda_package = _package("mlx-cuda")
    gpus = _nvidia_gpus() if system == "Linux" and (cuda_package or forced.strip().lower() == "cuda"
                                                   or os.path.exists("/proc/driver/nvidia/version")) else []
    return choose(forced, system, machine, cuda_package, gpus, _cpu_name(system), ram_bytes, _package("mlx-cpu"))
