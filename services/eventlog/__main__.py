from skulk.services.base import run_service
from skulk.services.eventlog.service import setup

run_service("eventlog", setup)
