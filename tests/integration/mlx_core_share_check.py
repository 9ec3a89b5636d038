"""The MLX engine on the CPU takes its share of the cores while another runner steps (a subprocess:
mlx stays out of pytest). `python -m tests.integration.mlx_core_share_check MODEL_DIR SHARE_DIR`
prints JSON: OpenBLAS's threads during the steps beside a busy runner and alone, whether the
runner counted as busy after its requests ended, and whether each change of threads waited for
mlx-lm's generation stream (the step it has in flight)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from skulk.services.runner.prelude import prepare

prepare()  # OpenBLAS before mlx, as a runner starts

from skulk.services.runner import blas  # noqa: E402
from skulk.services.runner.batch_engine import MlxBatchEngine  # noqa: E402
from skulk.services.runner.core_share import CoreShare  # noqa: E402
from skulk.wire.inference import RankInsert  # noqa: E402

CORES = 4  # as on a 4-core machine, whatever this one has


def answer(engine: MlxBatchEngine, prompt: list[int]) -> list[int]:
    """OpenBLAS's thread count at each step of one greedy request."""
    engine.insert([RankInsert(uid=engine.next_uid(), prompt=tuple(prompt), max_tokens=6, temperature=0.0,
                              top_p=1.0, top_k=0, min_p=0.0, seed=0, cached=0)])
    seen = []
    while engine.active():
        engine.step()
        library = blas._library  # noqa: SLF001 - empty where Debian's OpenBLAS was not preloaded
        seen.append(int(library[0].openblas_get_num_threads()) if library else -1)
    return seen


def main() -> None:
    import mlx.core as mx

    model_dir, share_dir = Path(sys.argv[1]), Path(sys.argv[2])
    engine = MlxBatchEngine(model_dir, None, max_batch=4, prefill_chunk=64, prefix_cache_bytes=0)
    engine.load()
    out: dict[str, object] = {"path": engine.path}
    synced: list[object] = []  # what the engine waits for before it changes OpenBLAS's threads
    real_synchronize = mx.synchronize
    mx.synchronize = lambda stream=None: (synced.append(stream), real_synchronize(stream))[1]
    engine.share = CoreShare(CORES, directory=share_dir)
    engine.stepping_threads = 0  # OpenBLAS told at the first step
    other = CoreShare(CORES, directory=share_dir)  # another runner of the machine, stepping
    other.busy(0.0)
    out["beside"] = answer(engine, [1, 2, 3, 4, 5])
    out["counted_when_done"] = other.busy(10.0) < CORES
    other.idle()
    engine.share.checked = float("-inf")  # look again at once (it looks every CHECK_S)
    out["alone"] = answer(engine, [1, 2, 3, 4, 5])
    out["waited_for_the_generation_stream"] = bool(synced) and all(s is engine.gen.stream for s in synced)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
