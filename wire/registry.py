"""The one explicit list of every wire message. A type not listed here cannot be decoded.

`docs/wire.md` lists exactly these names (checked by a test).
"""

from __future__ import annotations

from skulk.cluster import catalog as ct
from skulk.cluster import state as st
from skulk.wire import api_events as ae
from skulk.wire import cluster as cl
from skulk.wire import commands as cmd
from skulk.wire import config_sync as cs
from skulk.wire import inference as inf
from skulk.wire import staging as sg
from skulk.wire import tracing as tr
from skulk.wire.accelerator import Accelerator
from skulk.wire.control import AdminCommand, AdminReply, ChildReady, ChildStatus, Heartbeat
from skulk.wire.events import ChildLifecycle, RunnerReport, ServiceStatus
from skulk.wire.flight import FlightEntry, MlxMemory
from skulk.wire.message import Message
from skulk.wire.models import ModelCard
from skulk.wire.schema import compile_decoder

ALL: tuple[type[Message], ...] = (
    # control plane: child/admin <-> supervisor
    ChildReady,
    Heartbeat,
    AdminCommand,
    AdminReply,
    ChildStatus,
    # node-local bus events
    ServiceStatus,
    ChildLifecycle,
    RunnerReport,
    FlightEntry, MlxMemory,
    # models and replicated state
    ModelCard,
    st.ShardMeta, st.Instance, st.RunnerStatus, st.ToolCall, st.ChatMessage, st.TaskParams, st.Task,
    Accelerator, st.NodeInfo, st.DeletionNote, st.State,
    *st.EVENT_TYPES,
    st.IndexedEvent, st.StateHead,
    # commands to the master and its replies
    cmd.PlaceInstance, cmd.DeleteInstance, cmd.TextGeneration, cmd.TextEmbedding, cmd.TaskCancelled,
    cmd.TaskFinished, cmd.SnapshotRequest, cmd.RestartNode,
    cmd.CommandAccepted, cmd.CommandRejected, cmd.Routed, cmd.StateSnapshot,
    # the cluster-wide skulk.yaml (its event is in st.EVENT_TYPES)
    cs.ClusterConfig, cs.SetConfig,
    # the tracing switch (its event is in st.EVENT_TYPES)
    tr.SetTracing,
    # staging and the model store (its events are in st.EVENT_TYPES)
    sg.DownloadProgress, sg.DownloadReport, sg.PurgeStaging,
    # the model catalog (its event is in st.EVENT_TYPES)
    ct.CatalogReport,
    # the API's own records in the event log
    ae.ChunkGenerated, ae.RequestRouted, ae.RequestEnded,
    # data plane: API <-> runner
    inf.Generate, inf.Cancel, inf.Started, inf.Progress, inf.TopLogprob, inf.TokenChunk,
    inf.Done, inf.Failed, inf.Embed, inf.Embeddings, inf.RankHello, inf.RankInsert, inf.RankStep,
    # node to node
    cl.PeerHello, cl.Member, cl.Membership, cl.Campaign, cl.LeaderAnnounce, cl.EventBatch,
    cl.ReplayRequest, cl.SnapshotPush, cl.LocalEvent, cl.RunnerLoad, cl.ForwardCommand, cl.ForwardedReply,
)


def _index(classes: tuple[type[Message], ...]) -> dict[str, type[Message]]:
    by_type: dict[str, type[Message]] = {}
    for cls in classes:
        if not cls.TYPE:
            raise RuntimeError(f"{cls.__name__} has no TYPE")
        if cls.TYPE in by_type:
            raise RuntimeError(f"duplicate wire name {cls.TYPE}")
        by_type[cls.TYPE] = cls
        compile_decoder(cls)
    return by_type


BY_TYPE: dict[str, type[Message]] = _index(ALL)
