"""`skulk tap`: a live, decoded view of every message on a node's bus.

It subscribes to the bus's capture socket, which drops frames for a slow reader, so a slow,
frozen or killed tap never slows or blocks the node. Frames that do not decode are shown
raw with the reason, never fatal.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import zmq

from skulk.wire import codec, endpoints
from skulk.wire.errors import WireError
from skulk.wire.schema import fields_of
from skulk.wire.sockets import make_socket


def describe(frames: list[bytes]) -> dict[str, Any]:
    """One captured frame set as a plain record: time, topic, type, fields (or error)."""
    record: dict[str, Any] = {"time": time.time()}
    if len(frames) != 2:
        record.update(topic=None, type=None, error=f"{len(frames)} frames")
        return record
    record["topic"] = frames[0].decode(errors="replace")
    try:
        msg = codec.decode(frames[1])
        record.update(type=msg.TYPE, fields=fields_of(msg))
    except WireError as exc:
        record.update(type=None, error=f"{type(exc).__name__}: {exc}", raw_bytes=len(frames[1]))
    return record


def render(record: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(record["time"]))
    stamp += f".{int(record['time'] * 1000) % 1000:03d}"
    if record.get("error"):
        return f"{stamp}  {record.get('topic')}  !! {record['error']}"
    body = " ".join(f"{k}={v!r}" for k, v in record["fields"].items())
    return f"{stamp}  {record['topic']}  {record['type']}  {body}"


def run(home: Path, topic: str = "", as_json: bool = False, count: int = 0,
        duration_s: float = 0.0, out: TextIO = sys.stdout) -> int:
    """Print messages until Ctrl-C, `count` messages, or `duration_s` seconds."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    run_dir = endpoints.run_dir(home.expanduser().resolve())
    sock = make_socket(ctx, zmq.SUB, hwm=1000, connect=endpoints.bus_capture(run_dir),
                       subscribe=(topic.encode(),))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    deadline = time.monotonic() + duration_s if duration_s > 0 else None
    seen = 0
    try:
        while count <= 0 or seen < count:
            wait = 1.0 if deadline is None else deadline - time.monotonic()
            if wait <= 0:
                break
            if not sock.poll(int(wait * 1000) + 1, zmq.POLLIN):
                continue
            record = describe(sock.recv_multipart())
            seen += 1
            out.write((json.dumps(record, default=repr) if as_json else render(record)) + "\n")
            out.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        return 0
    finally:
        sock.close(0)
    return 0
