from skulk.services.base import run_service
from skulk.services.store.service import setup

run_service("store", setup)
