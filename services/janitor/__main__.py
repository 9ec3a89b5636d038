from skulk.services.base import run_service
from skulk.services.janitor.service import setup

run_service("janitor", setup)
