"""The model-store HTTP protocol as pure functions: which route a request names, which byte
range it asks for, and whether a relative file path may be served.

Kept apart from the server so every refusal (traversal, bad ranges, bad model segments) is
tested as a function; the server only does I/O with what these return.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from skulk.wire.models import ModelDirError, dir_name


class BadRequest(ValueError):
    """A request the store refuses (HTTP 400): the message says why."""


class NotFound(LookupError):
    """No such route or object (HTTP 404)."""


class RangeNotSatisfiable(ValueError):
    """A Range that starts at or beyond the end of the file (HTTP 416)."""


class RouteKind(StrEnum):
    HEALTH = "health"
    REGISTRY = "registry"
    FILES = "files"
    FILE = "file"
    MODEL = "model"
    DOWNLOAD = "download"
    DOWNLOAD_STATUS = "download_status"


@dataclass(frozen=True, slots=True)
class Route:
    kind: RouteKind
    model_dir: str = ""
    """The model's directory name `org--name` (a single, checked path segment)."""
    rel_path: str = ""
    """FILE only: the checked relative posix path inside the model directory."""

    @property
    def model_id(self) -> str:
        return self.model_dir.replace("--", "/", 1)


ALLOWED = {
    ("GET", RouteKind.HEALTH), ("GET", RouteKind.REGISTRY), ("GET", RouteKind.FILES),
    ("GET", RouteKind.FILE), ("HEAD", RouteKind.FILE), ("DELETE", RouteKind.MODEL),
    ("POST", RouteKind.DOWNLOAD), ("GET", RouteKind.DOWNLOAD_STATUS),
}


def model_segment(raw: str) -> str:
    """`org--name` from one URL segment (already percent-decoded), or BadRequest."""
    if not raw or raw.startswith(".") or any(c in raw for c in "/\\\x00") or ".." in raw:
        raise BadRequest(f"bad model segment {raw!r}: expected org--name")
    org, sep, name = raw.partition("--")
    if not sep or not org or not name:
        raise BadRequest(f"bad model segment {raw!r}: expected org--name")
    return raw


def model_dir_of(model_id: str) -> str:
    """`org/name` -> the checked directory name `org--name`, or BadRequest."""
    try:
        return model_segment(dir_name(model_id))
    except ModelDirError as exc:
        raise BadRequest(str(exc)) from None


def safe_rel_path(raw: str) -> str:
    """A relative posix path that stays inside its directory, or BadRequest.

    Refuses absolute paths, `..` and `.` parts, empty parts, backslashes (a Windows separator
    a client might smuggle), NUL, and hidden parts (`.cache`, temp files: never listed, so
    never served). Symlinks are checked against the real directory by the server.
    """
    if not raw or "\x00" in raw or "\\" in raw:
        raise BadRequest(f"bad file path {raw!r}")
    if raw.startswith("/") or PurePosixPath(raw).is_absolute():
        raise BadRequest(f"absolute file path {raw!r} refused")
    parts = raw.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise BadRequest(f"file path {raw!r} refused (empty, '.' or '..' part)")
        if part.startswith("."):
            raise BadRequest(f"file path {raw!r} refused (hidden part)")
    return "/".join(parts)


def parse_route(method: str, target: str) -> Route:
    """The route of a request line's target. Segments are split before percent-decoding, so an
    encoded `/` cannot join a model segment, and decoded once: `%2e%2e` is `..` and refused."""
    path = urlsplit(target).path
    raw = [s for s in path.split("/")]
    if raw and raw[0] == "":
        raw = raw[1:]
    segs = [unquote(s) for s in raw]
    route: Route | None = None
    if segs == ["health"]:
        route = Route(RouteKind.HEALTH)
    elif segs == ["registry"]:
        route = Route(RouteKind.REGISTRY)
    elif len(segs) >= 2 and segs[0] == "models":
        model = model_segment(segs[1])
        rest = segs[2:]
        if rest == [] or rest == [""]:
            route = Route(RouteKind.MODEL, model)
        elif rest == ["files"]:
            route = Route(RouteKind.FILES, model)
        elif rest == ["download"]:
            route = Route(RouteKind.DOWNLOAD, model)
        elif rest == ["download", "status"]:
            route = Route(RouteKind.DOWNLOAD_STATUS, model)
        elif rest[0] == "file" and len(rest) >= 2:
            route = Route(RouteKind.FILE, model, safe_rel_path("/".join(rest[1:])))
    if route is None:
        raise NotFound(f"no route {method} {path}")
    if (method, route.kind) not in ALLOWED:
        raise NotFound(f"no route {method} {path}")
    return route


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte range `(first, last)` a `Range` header asks of a file of `size` bytes.

    None: serve the whole file (no header, another unit, several ranges, or a malformed value:
    RFC 9110 lets a server ignore a Range it does not support). `bytes=N-` and `bytes=N-M`
    (M clamped to the end) and the suffix `bytes=-N` are served; a first byte at or beyond
    the end is RangeNotSatisfiable (416), so a client resuming a complete file learns it is.
    """
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_s, dash, last_s = spec.strip().partition("-")
    first_s, last_s = first_s.strip(), last_s.strip()
    if not dash or not (first_s.isdigit() or first_s == "") or not (last_s.isdigit() or last_s == ""):
        return None
    if first_s == "":
        if last_s == "":
            return None
        suffix = int(last_s)
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable(f"bytes=-{suffix} of a {size}-byte file")
        return max(0, size - suffix), size - 1
    first = int(first_s)
    if last_s and int(last_s) < first:
        return None
    if first >= size:
        raise RangeNotSatisfiable(f"range starts at {first}, file has {size} bytes")
    last = min(int(last_s), size - 1) if last_s else size - 1
    return first, last
