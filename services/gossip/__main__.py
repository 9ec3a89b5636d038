from skulk.services.base import run_service
from skulk.services.gossip.service import setup

run_service("gossip", setup)
