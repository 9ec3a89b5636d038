"""Split a request's output text into its channels (pure): thinking, tool calls, content.

The markers are the tokenizer's own (mlx-lm's `TokenizerWrapper`: `think_start`/`think_end`,
`tool_call_start`/`tool_call_end` with the model's tool parser). A marker may arrive split
across detokenized segments, so text that could begin a marker is held back until the next
segment decides (as stop strings are).
"""

from __future__ import annotations


def _held(buf: str, marker: str) -> int:
    """How many trailing characters of `buf` could be the start of `marker`."""
    for keep in range(min(len(marker) - 1, len(buf)), 0, -1):
        if marker.startswith(buf[-keep:]):
            return keep
    return 0


class ThinkSplitter:
    """Text in, `(text, is_reasoning)` pieces out; the markers themselves are dropped."""

    def __init__(self, start: str, end: str, inside: bool = False) -> None:
        self.start, self.end = start, end
        self.inside = inside  # the prompt already opened the thinking block
        self._pending = ""

    def feed(self, text: str) -> list[tuple[str, bool]]:
        buf, out = self._pending + text, []
        while True:
            marker = self.end if self.inside else self.start
            at = buf.find(marker)
            if at < 0:
                keep = _held(buf, marker)
                out.append((buf[:len(buf) - keep], self.inside))
                self._pending = buf[len(buf) - keep:]
                return [(t, r) for t, r in out if t]
            out.append((buf[:at], self.inside))
            buf, self.inside = buf[at + len(marker):], not self.inside

    def flush(self) -> list[tuple[str, bool]]:
        out, self._pending = self._pending, ""
        return [(out, self.inside)] if out else []


class ToolCallScanner:
    """Content text in; content out with each `start ... end` block cut out and returned as a
    call body for the model's tool parser. An unterminated block at the end is content."""

    def __init__(self, start: str, end: str) -> None:
        self.start, self.end = start, end
        self._pending = ""
        self._inside = False

    def feed(self, text: str) -> tuple[str, list[str]]:
        buf = self._pending + text
        content: list[str] = []
        calls: list[str] = []
        while True:
            if self._inside:
                at = buf.find(self.end)
                if at < 0:
                    self._pending = buf
                    return "".join(content), calls
                calls.append(buf[:at])
                buf, self._inside = buf[at + len(self.end):], False
                continue
            at = buf.find(self.start)
            if at < 0:
                keep = _held(buf, self.start)
                content.append(buf[:len(buf) - keep])
                self._pending = buf[len(buf) - keep:]
                return "".join(content), calls
            content.append(buf[:at])
            buf, self._inside = buf[at + len(self.start):], True

    def flush(self) -> str:
        out = (self.start if self._inside else "") + self._pending
        self._pending, self._inside = "", False
        return out
