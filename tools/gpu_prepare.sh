#!/usr/bin/env bash
# Fill .whl/ and .gpu/ for tools/gpu_llama_cpp.sh on a lent GPU machine (Python 3.12, torch's CUDA
# image, no network): what that image lacks, as wheels (the binding's without its CPU libraries:
# the script builds llama.cpp for the GPU and points the binding at it), llama.cpp's source as the
# binding's version vendors it, and the demo model's tokenizer. Run from the repository root, after
# `make setup`; both folders are git-ignored through .git/info/exclude and travel by `carry`.
set -eu -o pipefail
PY=.venv/bin/python
VERSION=$($PY -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.gpu/\n' >> .git/info/exclude
rm -rf .whl .gpu && mkdir -p .whl .gpu
pins=()
for name in pyzmq falcon gunicorn setproctitle mlx mlx-cpu mlx-lm llguidance gguf diskcache; do
  pins+=("$name==$($PY -c "import importlib.metadata as m; print(m.version('$name'))")")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${pins[@]}"
$PY -m pip wheel -q --no-deps --no-build-isolation -w .whl .
sdist=$(mktemp -d)
python3 -m pip download -q --no-deps --no-binary :all: -d "$sdist" "llama-cpp-python==$VERSION"
tar xzf "$sdist"/llama_cpp_python-"$VERSION".tar.gz -C "$sdist"
# The binding's Python files alone (its wheel as built here also holds CPU libraries the GPU build replaces).
$PY - "$sdist/llama_cpp_python-$VERSION" "$VERSION" <<'PY'
import base64, hashlib, sys, zipfile
from pathlib import Path
src, version = Path(sys.argv[1]), sys.argv[2]
dist = f"llama_cpp_python-{version}.dist-info"
files = {str(p.relative_to(src)): p.read_bytes() for p in (src / "llama_cpp").rglob("*.py")}
files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {version}\n".encode()
files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: skulk\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{dist}/RECORD,,"]
with zipfile.ZipFile(f".whl/llama_cpp_python-{version}-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
PY
tar cJf .gpu/llama.cpp.tar.xz -C "$sdist/llama_cpp_python-$VERSION/vendor" --exclude=llama.cpp/models \
  --exclude=llama.cpp/docs --exclude=llama.cpp/benches --exclude=llama.cpp/media --exclude='*.gguf' llama.cpp
demo=$($PY -c "import sys; from pathlib import Path; from skulk.scripts.real_model import build; print(build(Path(sys.argv[1])))" "$sdist/home")
$PY -m tools.random_gguf dump-tokenizer "$demo/model.gguf" .gpu/tokenizer.json
rm -rf "$sdist"
du -sh .whl .gpu
