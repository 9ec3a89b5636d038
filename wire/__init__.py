"""Skulk's wire: every message, its codec, topics, endpoints and socket factories.

Imports only the standard library, msgpack and pyzmq, never service code, so every
process (and the `tap`) can decode what it receives.
"""
