from skulk.services.base import run_service
from skulk.services.worker.service import setup

run_service("worker", setup)
