"""How many of the project's files a request passes through inside the API, and how often it
crosses from one file to another: a reader's measure of the code's layout (issue: "the API's
code is hard to find your way in").

Three paths, each in one API worker built as the node builds it (the real app, route table,
client shapes, generation path and links, with their real zmq sockets), against a stand-in
master (a ROUTER at the node's `master.sock`) and a stand-in runner (a ROUTER on a TCP port):

- `chat`: a streamed `POST /v1/chat/completions`, five tokens;
- `place`: `POST /place_instance`;
- `crash`: a streamed chat whose runner goes away after three tokens, to the client's error
  (`api.resume` off).

Every Python call is watched (`sys.setprofile`); a file counts when a function of it runs; a
transfer is a call from one project file into another (distinct caller -> callee file pairs,
and all of them). Run from the repo root: `python -m tools.request_paths`; `--root DIR` measures
another checkout of the project (e.g. a `git worktree` of an older commit) with the same harness.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the checkout to measure (its directory is the `skulk` package)")
    args = ap.parse_args()
    root = args.root.resolve()
    shim = Path(tempfile.mkdtemp(prefix="skulk-paths-"))
    (shim / "skulk").symlink_to(root, target_is_directory=True)
    sys.path.insert(0, str(shim))  # before the editable install's finder: `skulk` is this checkout
    for name in [m for m in sys.modules if m == "skulk" or m.startswith("skulk.")]:
        del sys.modules[name]
    prefixes = (f"{shim / 'skulk'}/", f"{root}/")
    results = {path: measure(prefixes, path) for path in ("chat", "place", "crash")}
    print(json.dumps({"root": str(root), **results}, indent=1))


def measure(prefixes: tuple[str, ...], path: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="skulk-paths-") as tmp:
        home = Path(tmp)
        app, stop = build(home, path)
        try:
            files, edges = watched(prefixes, lambda: request(app, path))
        finally:
            stop()
    api = [f for f in files if f.startswith("services/api/")]
    return {"files": len(files), "api_files": len(api), "transfers_distinct": len(edges),
            "transfers_all": sum(edges.values()), "file_list": files}


def watched(prefixes: tuple[str, ...], fn: Callable[[], None]) -> tuple[list[str], Counter[tuple[str, str]]]:
    """The project files whose functions ran in `fn` (this thread), and the calls between them."""
    skip = ("tools/", "tests/", ".venv/", "build/")
    seen: dict[str, None] = {}
    edges: Counter[tuple[str, str]] = Counter()

    def project(filename: str) -> str | None:
        for prefix in prefixes:
            if filename.startswith(prefix):
                rel = filename[len(prefix):]
                return None if rel.startswith(skip) else rel
        return None

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = project(frame.f_code.co_filename)
        if callee is None:
            return
        seen.setdefault(callee, None)
        caller = frame.f_back
        while caller is not None and project(caller.f_code.co_filename) is None:
            caller = caller.f_back  # through the libraries (falcon, zmq) to the project's caller
        if caller is not None and (src := project(caller.f_code.co_filename)) != callee and src is not None:
            edges[(src, callee)] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return sorted(seen), edges


def build(home: Path, path: str) -> tuple[Any, Callable[[], None]]:
    """The app of one worker on this checkout, its stand-in master and runner started."""
    import falcon.testing
    import zmq

    from skulk.wire import endpoints
    from skulk.wire.commands import CommandAccepted, Routed, TextGeneration
    from skulk.wire.inference import Done, Generate, Started, TokenChunk
    from skulk.wire.sockets import recv_routed, send_routed

    ctx: zmq.Context[Any] = zmq.Context.instance()
    run_dir = home / "run"
    run_dir.mkdir()
    model = home / "models" / "org--model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_key_value_heads": 2,
        "max_position_embeddings": 512}))
    (model / "model.safetensors").write_bytes(b"x" * 100)
    runner = ctx.socket(zmq.ROUTER)
    port = runner.bind_to_random_port("tcp://127.0.0.1")
    endpoint = f"tcp://127.0.0.1:{port}"
    master = ctx.socket(zmq.ROUTER)
    master.bind(endpoints.master_local(run_dir))
    replica, iid, rid = fake_replica(endpoint)
    stop = threading.Event()

    def serve_master() -> None:
        while not stop.is_set():
            if not master.poll(50):
                continue
            envelope, cmd = recv_routed(master)
            if isinstance(cmd, TextGeneration):
                send_routed(master, envelope, Routed(command_id=cmd.command_id, task_id="t1", instance_id=iid,
                                                     runner_id=rid, endpoint=endpoint))
            else:
                accepted = CommandAccepted(command_id=getattr(cmd, "command_id", ""), instance_id="i2")
                send_routed(master, envelope, accepted)

    def serve_runner() -> None:
        while not stop.is_set():
            if not runner.poll(50):
                continue
            envelope, msg = recv_routed(runner)
            if not isinstance(msg, Generate):
                continue
            r = msg.request_id
            send_routed(runner, envelope, Started(request_id=r, prompt_tokens=3))
            for i, ch in enumerate("Hello"):
                if path == "crash" and i == 3:
                    runner.close(0)  # the runner's process is gone: its link drops
                    return
                send_routed(runner, envelope, TokenChunk(request_id=r, seq=i, text=ch, token=ord(ch), index=i + 1))
            send_routed(runner, envelope, Done(request_id=r, seq=9, finish_reason="stop", prompt_tokens=3,
                                              completion_tokens=5, prompt_tps=1.0, generation_tps=1.0,
                                              peak_memory_bytes=0))

    threads = [threading.Thread(target=fn, daemon=True) for fn in (serve_master, serve_runner)]
    for t in threads:
        t.start()
    app = falcon.testing.TestClient(build_app(home, run_dir, replica, resume=path != "crash"))

    def close() -> None:
        stop.set()
        for t in threads:
            t.join(2)
        master.close(0)
        runner.close(0)

    return app, close


def fake_replica(endpoint: str) -> tuple[Any, str, str]:
    from skulk.cluster.state import (
        ChatMessage,
        NodeGatheredInfo,
        NodeInfo,
        RunnerStatus,
        RunnerStatusUpdated,
        State,
    )

    class Replica:
        departed: frozenset[str] = frozenset()
        started = 0.0
        members = 1

        def __init__(self, state: State) -> None:
            self.state = state

        def get(self, timeout: float = 5.0) -> State:
            return self.state

        def wait_change(self, after_idx: int, timeout: float) -> None:
            return None

    from skulk.cluster.reducer import apply
    from skulk.cluster.state import IndexedEvent
    from skulk.services.master import commands
    from skulk.wire.commands import PlaceInstance
    from skulk.wire.models import ModelCard

    _ = ChatMessage
    card = ModelCard(model_id="org/model", storage_size_bytes=100, n_layers=2, hidden_size=64,
                     num_key_value_heads=2, supports_tensor=True, context_length=512, family="qwen2",
                     quantization="float32")
    from skulk.cluster.catalog import NodeCatalogUpdated

    state = State(session="s")
    events: list[Any] = [NodeGatheredInfo(info=NodeInfo(node_id="n1", friendly_name="n1", skulk_version="t",
                                                        ram_total=16 << 30, ram_available=12 << 30, when=0.0)),
                         NodeCatalogUpdated(node_id="n1", cards=(card,))]
    for ev in events:
        state = apply(state, IndexedEvent(idx=state.last_event_applied_idx + 1, session="s", event=ev))
    count = iter(range(1000))
    out = commands.handle(state, PlaceInstance(command_id="c", card=card), lambda: f"{next(count):032x}", 0.0)
    for ev in out.events:
        state = apply(state, IndexedEvent(idx=state.last_event_applied_idx + 1, session="s", event=ev))
    (iid,) = state.instances
    (rid,) = state.instances[iid].runner_to_shard
    ready = RunnerStatusUpdated(runner_id=rid, status=RunnerStatus(kind="RunnerReady", endpoint=endpoint))
    state = apply(state, IndexedEvent(idx=state.last_event_applied_idx + 1, session="s", event=ready))
    return Replica(state), iid, rid


def build_app(home: Path, run_dir: Path, replica: Any, resume: bool) -> Any:
    """`create_app`'s wiring with the stand-in replica, in this checkout's own terms."""
    try:  # the API in parts (http/, generate/, links/, ...)
        app_mod = importlib.import_module("skulk.services.api.http.app")
        from skulk.node.role_args import ApiArgs, ChildArgs
        from skulk.services.api.generate.generation import Generation
        from skulk.services.api.generate.timing import StreamTiming
        from skulk.services.api.http.declare import Deps
        from skulk.services.api.links.master_client import MasterClient
        from skulk.services.api.links.runner_link import RunnerLink

        api = ApiArgs(port=0, node_id="n1", keepalive=10.0, stall_timeout=120.0, resume_attempts=2 if resume else 0)
        master, runners = MasterClient(run_dir), RunnerLink(replica, StreamTiming.of(api))
        generation = Generation(master, runners, replica, "n1")
        deps = Deps(replica=replica, master=master, runners=runners, generation=generation, api=api, version="t",
                    child=ChildArgs(child_id="api", title="api", home=home, run_dir=run_dir))
    except ModuleNotFoundError:  # the API before it: one folder, a gateway
        app_mod = importlib.import_module("skulk.services.api.app")
        gw = importlib.import_module("skulk.services.api.gateway")
        gen = importlib.import_module("skulk.services.api.generation")
        declare = importlib.import_module("skulk.services.api.declare")
        timing = gw.StreamTiming(resume_attempts=2 if resume else 0)
        gateway = gw.Gateway(run_dir, replica, timing)
        generation = gen.Generation(gateway, replica, "n1")
        deps = declare.Deps(replica=replica, gateway=gateway, generation=generation, node_id="n1",
                            models=home / "models", version="t", config_file=home / "skulk.yaml", home=home,
                            run_dir=run_dir)
    return app_mod.build_app(deps)


def request(app: Any, path: str) -> None:
    if path == "place":
        got = app.simulate_post("/place_instance", json={"model_id": "org/model"})
    else:
        got = app.simulate_post("/v1/chat/completions", json={
            "model": "org/model", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    expect = {"chat": "[DONE]", "crash": "error", "place": "command_id"}[path]
    assert expect in got.text and (path == "crash" or "error" not in got.text), (path, got.status_code, got.text)


if __name__ == "__main__":
    main()
