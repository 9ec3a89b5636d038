"""Run as a script (mlx stays out of the pytest process): the embedding runner's pooling on a
tiny batch of right-padded hidden states; prints JSON for `test_embeddings.py` to check."""

from __future__ import annotations

import json

import mlx.core as mx

from skulk.services.runner.embed_engine import Pooling, pool

# 2 inputs (3 and 1 real tokens), 3 positions, width 2; the padding is huge so any leak shows.
HIDDEN = mx.array([[[3.0, 0.0], [0.0, 4.0], [3.0, 8.0]],
                   [[0.0, -2.0], [100.0, 100.0], [100.0, 100.0]]])


def main() -> None:
    out = {mode.value: pool(HIDDEN, [3, 1], mode).tolist() for mode in Pooling}
    out["mean_dims_1"] = pool(HIDDEN, [3, 1], Pooling.MEAN, dimensions=1).tolist()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
