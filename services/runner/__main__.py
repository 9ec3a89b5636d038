from skulk.services.runner.prelude import prepare

_BLAS = prepare()  # before anything imports mlx or transformers

from skulk.services.base import run_service  # noqa: E402
from skulk.services.runner.service import setup_runner  # noqa: E402

run_service("runner", lambda loop, argv: setup_runner(loop, argv, _BLAS))
