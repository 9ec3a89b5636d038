"""Stop strings over a token stream (pure): hold back text that could begin a stop string."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self._pending = ""
        self.hit = ""  # the stop string that ended the text (Anthropic's `stop_sequence`)

    def feed(self, text: str) -> tuple[str, bool]:
        """Text safe to emit now, and whether a stop string was hit (text before it emitted)."""
        if not self.stops:
            return text, False
        buf = self._pending + text
        found = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        if found:
            cut, self.hit = min(found)
            self._pending = ""
            return buf[:cut], True
        keep = self._hold
        while keep and not any(s.startswith(buf[len(buf) - keep:]) for s in self.stops):
            keep -= 1
        self._pending = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep] if keep else buf, False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out
