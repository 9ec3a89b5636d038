from skulk.services.base import run_service
from skulk.services.bus.service import setup

run_service("bus", setup)
