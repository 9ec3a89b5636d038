"""The decode-matmul measurements kept per machine and model (`cpu_linear_kept`): read back only
under the key they were made with, never from a torn or foreign file, and a cache folder that
cannot be written costs nothing but measuring again; `cpu_linear._measure` measures only what is
not kept. (That `install` reads them back at its next call is checked with mlx in
`cpu_ops_check.py`.)"""

from __future__ import annotations

import json
import os

import pytest

from skulk.services.runner import cpu_linear
from skulk.services.runner.cpu_linear_kept import FOLDER, Kept, Measured, Timing, cpu_identity, key_of, parse

MACHINE = {"cpu": "x", "arch": "x86_64", "cores": 2, "usable": 2, "blas": "libblas.so.3 | OpenBLAS 0.3.21 | Zen",
           "blas_threads": "", "mlx": "0.30"}
CODE = "c0de"
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
    {"cpu": "y"}, {"cores": 4}, {"usable": 1}, {"blas": "libblas.so.3 | OpenBLAS 0.3.21 | Haswell"},
    {"blas_threads": "1"}, {"mlx": "0.31"}, {"arch": "aarch64"}])
def test_another_machine_blas_threads_or_mlx_is_another_key(change):
    assert key_of({**MACHINE, **change}, SHAPES, True, CODE) != key_of(MACHINE, SHAPES, True, CODE)


def test_other_weights_one_stream_or_other_block_code_is_another_key():
    assert key_of(MACHINE, SHAPES, True, CODE) == key_of(dict(reversed(list(MACHINE.items()))), list(SHAPES), True,
                                                         CODE)
    assert key_of(MACHINE, SHAPES[:2], True, CODE) != key_of(MACHINE, SHAPES, True, CODE)
    assert key_of(MACHINE, SHAPES, False, CODE) != key_of(MACHINE, SHAPES, True, CODE)
    assert key_of(MACHINE, SHAPES, True, "other") != key_of(MACHINE, SHAPES, True, CODE)
    assert len(cpu_linear.code_fingerprint()) == 16


def test_measurements_are_read_back_as_kept(tmp_path):
    kept = Kept(tmp_path, key_of(MACHINE, SHAPES, True, CODE))
    assert kept.read() is None
    checked = Measured("")
    kept.keep(checked)
    assert kept.read() == checked
    timed = Measured("", Timing(51.0, 56.0, 210))
    kept.keep(timed)
    assert Kept(tmp_path, key_of(MACHINE, SHAPES, True, CODE)).read() == timed
    assert Kept(tmp_path, key_of(MACHINE, SHAPES, False, CODE)).read() is None
    inexact = Measured("a row of 576x576 differs by 2.4e-06 between a call of 1 row and one of 9")
    kept.keep(inexact)
    assert kept.read() == inexact
    no_temp_left = [f"{key_of(MACHINE, SHAPES, True, CODE)}.json"]
    assert [p.name for p in (tmp_path / FOLDER).iterdir()] == no_temp_left


@pytest.mark.parametrize("text", ["", "{", "[]", "{}", '{"differs": 3, "timing": null}',
                                  '{"differs": "", "timing": [1.0, 2.0]}', '{"differs": "", "timing": "fast"}',
                                  '{"differs": "", "timing": [1.0, "x", 3]}'])
def test_a_torn_or_foreign_file_is_measured_again(tmp_path, text):
    assert parse(text) is None
    kept = Kept(tmp_path, "k")
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / "k.json").write_text(text)
    assert kept.read() is None


def test_a_file_that_is_not_text_is_measured_again(tmp_path):
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / "k.json").write_bytes(b'\xff\xfe{"differs": ""}')
    assert Kept(tmp_path, "k").read() is None


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


class Counted:
    """`cpu_linear`'s two measurements, faked and counted (no mlx in the test process)."""

    def __init__(self, monkeypatch, differs: str = "") -> None:
        self.exact = self.timed = 0
        self.differs = differs
        monkeypatch.setattr(cpu_linear, "exact_here", self._exact_here)
        monkeypatch.setattr(cpu_linear, "_time_both", self._time_both)

    def _exact_here(self, _blocked, _weights) -> str:
        self.exact += 1
        return self.differs

    def _time_both(self, _blocked, _weights, _timer) -> tuple[float, float, int]:
        self.timed += 1
        return 51.0, 40.0, 210


def measure(kept: Kept, timed: bool) -> tuple[Measured, bool]:
    return cpu_linear._measure(kept, None, [], timed, lambda: 0.0)  # type: ignore[arg-type]


def test_measured_once_then_read_back_in_auto_mode(tmp_path, monkeypatch):
    counted = Counted(monkeypatch)
    kept = Kept(tmp_path, "k")
    assert measure(kept, True) == (Measured("", Timing(51.0, 40.0, 210)), False)
    assert measure(kept, True) == (Measured("", Timing(51.0, 40.0, 210)), True)
    assert (counted.exact, counted.timed) == (1, 1)


def test_a_forced_starts_check_is_kept_and_a_later_auto_start_only_times(tmp_path, monkeypatch):
    counted = Counted(monkeypatch)
    kept = Kept(tmp_path, "k")
    assert measure(kept, False) == (Measured(""), False)  # forced: exactness only
    assert measure(kept, False) == (Measured(""), True)
    assert measure(kept, True) == (Measured("", Timing(51.0, 40.0, 210)), False)  # auto: the timing added
    assert measure(kept, True)[1] and (counted.exact, counted.timed) == (1, 1)


def test_an_inexact_layout_is_never_timed_and_its_verdict_is_kept(tmp_path, monkeypatch):
    counted = Counted(monkeypatch, differs="a row of 576x576 differs by 1.0e-07 between a call of 1 row and one of 9")
    kept = Kept(tmp_path, "k")
    assert measure(kept, True) == (Measured(counted.differs), False)
    assert measure(kept, True) == (Measured(counted.differs), True)
    assert (counted.exact, counted.timed) == (1, 0)
