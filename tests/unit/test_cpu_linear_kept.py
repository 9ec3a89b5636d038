"""The decode-matmul measurements kept per machine and model (`cpu_linear_kept`): read back only
under the key they were made with, never from a torn or foreign file, and a cache folder that
cannot be written costs nothing but measuring again. (That `install` reads them back at its next
call is checked with mlx in `cpu_ops_check.py`.)"""

from __future__ import annotations

import json
import os

import pytest

from skulk.services.runner.cpu_linear_kept import FOLDER, Kept, Measured, cpu_identity, key_of, parse

MACHINE = {"cpu": "x", "arch": "x86_64", "cores": 2, "blas": ["/usr/lib/libblas.so.3", 1, 2], "mlx": "0.30"}
SHAPES = [(576, 576), (1536, 576), (49152, 576)]

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu avx2 avx512f
bogomips\t: 5200.00

processor\t: 1
model name\t: AMD EPYC 9B14
flags\t\t: fpu avx2 avx512f
"""


def test_the_cpu_is_named_by_its_model_and_instruction_sets():
    assert json.loads(cpu_identity(CPUINFO)) == {"model name": "AMD EPYC 9B14", "flags": "fpu avx2 avx512f"}
    assert cpu_identity(CPUINFO) != cpu_identity(CPUINFO.replace("avx512f", ""))  # a host without AVX-512
    arm = "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert json.loads(cpu_identity(arm)) == {"Features": "fp asimd", "CPU implementer": "0x41", "CPU part": "0xd0c"}


@pytest.mark.parametrize("change", [
    {"cpu": "y"}, {"cores": 4}, {"blas": ["/usr/lib/libblas.so.3", 1, 3]}, {"mlx": "0.31"}, {"arch": "aarch64"}])
def test_another_machine_blas_or_mlx_is_another_key(change):
    assert key_of({**MACHINE, **change}, SHAPES, True) != key_of(MACHINE, SHAPES, True)


def test_other_weights_or_one_stream_is_another_key():
    assert key_of(MACHINE, SHAPES, True) == key_of(dict(reversed(list(MACHINE.items()))), list(SHAPES), True)
    assert key_of(MACHINE, SHAPES[:2], True) != key_of(MACHINE, SHAPES, True)
    assert key_of(MACHINE, SHAPES, False) != key_of(MACHINE, SHAPES, True)


def test_measurements_are_read_back_as_kept(tmp_path):
    kept = Kept(tmp_path, key_of(MACHINE, SHAPES, True))
    assert kept.read() is None
    checked = Measured("")
    kept.keep(checked)
    assert kept.read() == checked
    timed = Measured("", (51.0, 56.0, 210))
    kept.keep(timed)
    assert Kept(tmp_path, key_of(MACHINE, SHAPES, True)).read() == timed
    assert Kept(tmp_path, key_of(MACHINE, SHAPES, False)).read() is None
    inexact = Measured("a row of 576x576 differs by 2.4e-06 between a call of 1 row and one of 9")
    kept.keep(inexact)
    assert kept.read() == inexact
    assert [p.name for p in (tmp_path / FOLDER).iterdir()] == [f"{key_of(MACHINE, SHAPES, True)}.json"]  # no temp left


@pytest.mark.parametrize("text", ["", "{", "[]", "{}", '{"differs": 3, "timing": null}',
                                  '{"differs": "", "timing": [1.0, 2.0]}', '{"differs": "", "timing": "fast"}',
                                  '{"differs": "", "timing": [1.0, "x", 3]}'])
def test_a_torn_or_foreign_file_is_measured_again(tmp_path, text):
    assert parse(text) is None
    kept = Kept(tmp_path, "k")
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / "k.json").write_text(text)
    assert kept.read() is None


def test_nowhere_to_keep_them_means_measuring_at_every_start(tmp_path):
    Kept(None, "k").keep(Measured(""))  # no home at all
    assert Kept(None, "k").read() is None
    tmp_path.chmod(0o500)
    try:
        Kept(tmp_path, "k").keep(Measured(""))  # a read-only home: no error, nothing kept
    finally:
        tmp_path.chmod(0o700)
    if os.geteuid() != 0:  # root writes anywhere
        assert Kept(tmp_path, "k").read() is None and not (tmp_path / FOLDER).exists()
