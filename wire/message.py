"""The base of every wire message: a frozen, slotted, keyword-only dataclass.

`TYPE` is the stable wire name (never the Python class name) and `VERSION` is bumped only
by a breaking change; additive fields with defaults keep it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
