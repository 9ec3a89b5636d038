"""A node's name when it was given none: its host name, or a derived name where that is taken.

Machines of one model or one image share a host name (a rack of `Mac-mini`s, Linux boxes cloned
from one image, several nodes on one machine), and names are unique in a cluster. A node named
by nobody (no `--node-name`, `SKULK_NODE_NAME` or `node.name`) starts under its host name; when
gossip meets a live node that holds that name and started first, it takes its **derived name**,
`<host>-<suffix>`, and joins under it. The suffix is four hex digits made once per home and kept
in `<home>/node-suffix`, so a node's derived name is the same at every start; once it has taken
its derived name, `<home>/node-name` remembers that, and later starts begin under it (the names
an operator sees do not swap when the nodes come back in another order). A name given
explicitly is never replaced: a clash refuses the later node, as it always did.
"""

from __future__ import annotations

import os
import secrets
import string
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from skulk.node.model_store import same_name

if TYPE_CHECKING:
    from skulk.node.config import NodeConfig

SUFFIX_FILE = "node-suffix"
TAKEN_FILE = "node-name"
SUFFIX_LEN = 4
MAX_NAME = 253


def derive(host: str, suffix: str) -> str:
    """`<host>-<suffix>`, the host part shortened so the whole stays a valid node name."""
    return f"{host[:MAX_NAME - 1 - len(suffix)]}-{suffix}"


def _valid_suffix(text: str) -> bool:
    return len(text) == SUFFIX_LEN and all(c in string.hexdigits.lower() for c in text)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


def home_suffix(home: Path) -> str:
    """This home's suffix: read from `<home>/node-suffix`, made (and kept) at its first use."""
    path = home / SUFFIX_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if _valid_suffix(text):
        return text
    suffix = secrets.token_hex(SUFFIX_LEN // 2)
    home.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, suffix)
    return suffix


def remembered(home: Path) -> str:
    """The derived name this home took at an earlier start ("" if none, or unreadable)."""
    try:
        return (home / TAKEN_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def remember(home: Path, name: str) -> None:
    """Keep the derived name this node took: its later starts begin under it."""
    _write_atomic(home / TAKEN_FILE, name)


def config_names_host(cfg: NodeConfig) -> bool:
    """Whether the config points at this node by its host name (`model_store.store_host`, a
    `node_overrides` key): then the host name is as good as given, never exchanged for another."""
    store = cfg.model_store
    if store is None or not cfg.host_name:
        return False
    return any(same_name(key, cfg.host_name) for key in (store.store_host, *(k for k, _ in store.node_overrides)))


def named(cfg: NodeConfig) -> NodeConfig:
    """`cfg` with its derived name filled in, where the node was given no name (it then starts
    under the derived name if it took it before, else under its host name). A node the config
    points at by its host name keeps it, as a node given that name does. Raises OSError where
    the home cannot hold the suffix."""
    if not cfg.host_name or config_names_host(cfg):
        return cfg
    derived = derive(cfg.host_name, home_suffix(cfg.home))
    start_as = derived if same_name(remembered(cfg.home), derived) else cfg.node_name
    return replace(cfg, node_name=start_as, derived_name=derived)


def current(cfg: NodeConfig) -> str:
    """The name the node goes by now: its derived name once gossip took it, else its start name."""
    if cfg.derived_name and same_name(remembered(cfg.home), cfg.derived_name):
        return cfg.derived_name
    return cfg.node_name


def names(cfg: NodeConfig) -> tuple[str, ...]:
    """Every name config may point at this node by (`model_store.store_host`, `node_overrides`):
    the name it starts under and, for a node given none, its derived name. The host name of a
    node that may exchange it is not among them unless it starts under it, and config that names
    the host name keeps the node under it (`config_names_host`): no two nodes sharing a host
    name both match."""
    return tuple(dict.fromkeys(n for n in (cfg.node_name, cfg.derived_name) if n))
