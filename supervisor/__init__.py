"""Skulk's process tree: OTP-style supervisors whose leaves are OS processes.

The supervisor never imports mlx or any service code; children are fresh interpreters.
"""
