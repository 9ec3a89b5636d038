"""Which accelerator a node reports and its runners use (pure: the facts are passed in)."""

from __future__ import annotations

from skulk.wire.accelerator import choose

H200 = [("NVIDIA H200", 143771 * 2**20)]


def test_a_linux_box_with_mlx_cuda_and_a_gpu_is_cuda():
    acc = choose("", "Linux", "x86_64", "mlx-cuda-13", H200, "AMD EPYC", 1 << 40)
    assert (acc.kind, acc.name, acc.memory_bytes, acc.backend, acc.note) == (
        "cuda", "NVIDIA H200", 143771 * 2**20, "mlx-cuda-13", "")
    assert choose("", "Linux", "x86_64", "mlx-cuda-13", H200 * 2, "", 0).count == 2


def test_cpu_is_forced_or_the_default_without_a_gpu():
    assert choose("cpu", "Linux", "x86_64", "mlx-cuda-13", H200, "AMD EPYC", 0).kind == "cpu"
    plain = choose("", "Linux", "x86_64", "", [], "AMD EPYC", 0, "mlx-cpu")
    assert (plain.kind, plain.name, plain.backend, plain.note) == ("cpu", "AMD EPYC", "mlx-cpu", "")


def test_a_mac_is_metal_with_its_unified_memory():
    acc = choose("", "Darwin", "arm64", "", [], "Apple M2 Max", 96 << 30)
    assert (acc.kind, acc.name, acc.memory_bytes) == ("metal", "Apple M2 Max", 96 << 30)


def test_what_cannot_be_had_is_said_not_hidden():
    no_backend = choose("", "Linux", "x86_64", "", H200, "EPYC", 0, "mlx-cpu")
    assert no_backend.kind == "cpu" and "CUDA backend is not installed" in no_backend.note
    no_gpu = choose("cuda", "Linux", "x86_64", "mlx-cuda-13", [], "EPYC", 0)
    assert no_gpu.kind == "cpu" and "no NVIDIA GPU" in no_gpu.note
    shadowed = choose("", "Linux", "x86_64", "mlx-cuda-13", H200, "EPYC", 0, "mlx-cpu")
    assert shadowed.kind == "cuda" and "pip uninstall mlx-cpu" in shadowed.note
    assert "not cpu or cuda" in choose("gpu", "Linux", "x86_64", "", [], "EPYC", 0).note


def test_nvidia_smi_rows_keep_a_name_whole(monkeypatch):
    import subprocess

    from skulk.wire import accelerator

    out = "NVIDIA H200, 143771\nNVIDIA H100 80GB HBM3, 81559\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, out, ""))
    assert accelerator._nvidia_gpus() == [("NVIDIA H200", 143771 * 2**20), ("NVIDIA H100 80GB HBM3", 81559 * 2**20)]
