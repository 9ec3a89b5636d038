"""llama.cpp's own `llama-server`, built once from the llama.cpp that llama-cpp-python vendors.

    python -m tools.llama_server [--print]

The benchmark's baseline for the llama.cpp engine (`bench_throughput --engine llama_cpp`): the
same llama.cpp version as the engine's binding, so the two compare one code base. No package on
the index ships the binary for Linux, so it is built from the binding's source distribution
(downloaded by pip into `~/.cache/skulk/llama-server/`) with cmake and ninja, natively for this
CPU, and kept there: about 10 minutes on two cores the first time, nothing after. Prints the
binary's path.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "skulk" / "llama-server"
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DBUILD_SHARED_LIBS=OFF")  # one self-contained binary, copied out of the build tree


def binding_version() -> str:
    """The llama-cpp-python version installed beside us (the server is built from the same)."""
    return importlib.metadata.version("llama_cpp_python")


def binary(version: str | None = None) -> Path:
    """Where the built server of `version` lives (built or not)."""
    return CACHE / (version or binding_version()) / "llama-server"


def build(version: str | None = None, jobs: int = 0) -> Path:
    """The server binary of `version`, built if it is not yet (idempotent)."""
    version = version or binding_version()
    target = binary(version)
    if target.is_file():
        return target
    work = CACHE / f"{version}.build"
    work.mkdir(parents=True, exist_ok=True)
    sdist = work / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "-d", str(work), f"llama-cpp-python=={version}"], check=True)
    source = work / f"llama_cpp_python-{version}"
    if not source.is_dir():
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
    llama = source / "vendor" / "llama.cpp"
    out = work / "build"
    subprocess.run(["cmake", "-S", str(llama), "-B", str(out), "-G", "Ninja", *CMAKE_FLAGS], check=True)
    subprocess.run(["cmake", "--build", str(out), "--target", "llama-server",
                    "-j", str(jobs or os.cpu_count() or 2)], check=True)
    built = out / "bin" / "llama-server"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, target.with_suffix(".part"))
    subprocess.run([str(target.with_suffix(".part")), "--version"], check=True, capture_output=True)  # it runs
    target.with_suffix(".part").rename(target)
    shutil.rmtree(work, ignore_errors=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print where it would be; build nothing")
    parser.add_argument("--jobs", type=int, default=0)
    args = parser.parse_args()
    print(binary() if args.print else build(jobs=args.jobs))


if __name__ == "__main__":
    main()
