"""transformers' model index kept between processes (`services/runner/transformers_index.py`):
the walk of a folder is answered from the cache only while the folder is unchanged, its own
recursion is left alone, a torn or foreign cache is rebuilt, and the real import gives the same
index with the hook as without it, from the second process on without the walk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from skulk.services.runner.transformers_index import FolderIndex, cached


def walker(calls: list[str]):
    """A stand-in for transformers' walk: recurses once through the module-level name, as the
    real one does, and records every call it gets."""
    holder: dict[str, object] = {}

    def real(path: str) -> dict[str, object]:
        calls.append(str(path))
        if os.path.isdir(path) and not str(path).endswith("sub"):
            return {"top": sorted(os.listdir(path)), "sub": holder["walk"](os.path.join(path, "sub"))}
        return {"leaf": str(path)}

    return real, holder


def test_a_walk_is_kept_per_folder_and_read_back_by_the_next_process(tmp_path):
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    store = tmp_path / "cache" / "index.pickle"
    calls: list[str] = []
    real, holder = walker(calls)
    walk = holder["walk"] = cached(real, lambda: FolderIndex(store))
    first = walk(str(folder))
    assert calls == [str(folder), str(folder / "sub")] and store.exists()  # the recursion went to `real`

    calls.clear()  # another process: a fresh index read from the file
    again = cached(real, lambda: FolderIndex(store))
    holder["walk"] = again
    assert again(str(folder)) == first and calls == []
    assert again(str(folder / "__init__.py")) == first and calls == []  # a file stands for its folder

    (folder / "new_model").mkdir()  # the folder changed: walked again, and kept anew
    assert again(str(folder))["top"] == ["__init__.py", "new_model", "sub"] and calls[0] == str(folder)


def test_a_torn_or_foreign_cache_is_walked_again(tmp_path):
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    store = tmp_path / "index.pickle"
    for junk in (b"\x80\x05torn", b"not a pickle", b"\x80\x04K\x05."):  # the last: a pickled 5
        store.write_bytes(junk)
        calls: list[str] = []
        real, holder = walker(calls)
        walk = holder["walk"] = cached(real, lambda: FolderIndex(store))
        assert walk(str(folder))["top"] == ["sub"] and calls[0] == str(folder)


def test_nowhere_to_keep_it_or_a_failing_cache_only_means_the_walk(tmp_path):
    """No home (a bare service account), an unwritable cache folder, a cache that raises: the
    import walks as it would without the cache, and leaves no file behind."""
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    nowhere = FolderIndex(None)
    nowhere.put("x", 1, {"a": 1})
    assert nowhere.get("x", 1) == {"a": 1}  # this process still has it

    def broken() -> FolderIndex:
        raise RuntimeError("Could not determine home directory.")

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for index_of in (broken, lambda: FolderIndex(locked / "cache" / "index.pickle")):
            calls: list[str] = []
            real, holder = walker(calls)
            walk = holder["walk"] = cached(real, index_of)
            assert walk(str(folder))["top"] == ["sub"] and calls[0] == str(folder)
    finally:
        locked.chmod(0o700)
    if os.geteuid() != 0:  # root writes anywhere
        assert list(locked.iterdir()) == []


def test_a_missing_folder_goes_to_the_walk_itself(tmp_path):
    calls: list[str] = []
    real, holder = walker(calls)
    walk = holder["walk"] = cached(real, lambda: FolderIndex(tmp_path / "index.pickle"))
    assert walk(str(tmp_path / "nowhere")) == {"leaf": str(tmp_path / "nowhere")}
    assert not (tmp_path / "index.pickle").exists()


CHECK = """
import hashlib, sys
if sys.argv[1] == "hook":
    from skulk.services.runner import transformers_index
    transformers_index.install()
import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # what mlx-lm imports
from pathlib import Path
from transformers.utils import import_utils
def norm(o):
    if isinstance(o, dict):
        return sorted((repr(norm(k)), norm(v)) for k, v in o.items())
    if isinstance(o, (set, frozenset)):
        return sorted(map(repr, o))
    return o
index = import_utils.define_import_structure(Path(transformers.__file__).parent / "models", prefix="models")
walk = import_utils.create_import_structure_from_path
memo = walk if hasattr(walk, "cache_info") else walk.__wrapped__  # transformers' own lru_cache
walked = memo.cache_info().misses  # folders read from their sources
print(walk.__module__, hashlib.sha256(repr(norm(index)).encode()).hexdigest(), walked)
"""


def test_the_real_import_gives_the_same_index_with_the_cache(tmp_path):
    """Three interpreters: without the hook, with it and no cache, with it and the cache (which
    reads no folder of model sources at all)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}

    def run(mode: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", CHECK, mode], capture_output=True, text=True, env=env,
                             timeout=300, check=True, cwd=Path(__file__).resolve().parents[2])
        return out.stdout.split()

    plain, cold, warm = run("plain"), run("hook"), run("hook")
    assert plain[0] == "transformers.utils.import_utils"
    assert cold[0] == warm[0] == "skulk.services.runner.transformers_index"
    assert plain[1] == cold[1] == warm[1]
    assert int(plain[2]) > 100 and int(cold[2]) > 100 and int(warm[2]) == 0, (plain, cold, warm)
    (kept,) = (tmp_path / "skulk").glob("transformers-*-index.pickle")
    assert len(FolderIndex(kept).entries) >= 1
