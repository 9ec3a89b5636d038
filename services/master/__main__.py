from skulk.services.base import run_service
from skulk.services.master.service import setup

run_service("master", setup)
