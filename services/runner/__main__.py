from skulk.services.base import run_service
from skulk.services.runner.service import setup

run_service("runner", setup)
