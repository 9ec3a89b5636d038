"""Nodes on different versions: a warning for the cluster, and a node whose hello this build
cannot read refused with both versions named (pure)."""

from __future__ import annotations

import pytest

from skulk.services.api.observe.state_json import cluster_warnings
from skulk.wire import codec
from skulk.wire.cluster import PeerHello
from skulk.wire.errors import UnknownMessage
from skulk.wire.version import peer_versions, skew_refusal
from tests.unit.builders import info, newer_hello


def test_one_version_is_quiet_two_are_a_warning_naming_each():
    assert cluster_warnings({"a": info("a", "0.4.0"), "b": info("b", "0.4.0")}) == []
    (w,) = cluster_warnings({"a": info("a", "0.4.0"), "b": info("b", "0.3.9"), "c": info("c", "0.4.0")})
    assert w["code"] == "version_mismatch" and w["versions"] == {"0.3.9": ["mac-b"], "0.4.0": ["mac-a", "mac-c"]}
    assert "0.3.9 on mac-b; 0.4.0 on mac-a, mac-c" in w["message"]


def test_a_hello_from_a_newer_protocol_is_refused_with_both_versions():
    raw = newer_hello()
    with pytest.raises(UnknownMessage):
        codec.decode(raw)
    theirs = peer_versions(raw)
    assert theirs == ("zz", "9.9.9", PeerHello.VERSION + 1)
    said = skew_refusal(theirs, "0.4.0", PeerHello.VERSION)
    assert "skulk 9.9.9" in said and "skulk 0.4.0" in said and f"v{PeerHello.VERSION + 1}" in said
    assert peer_versions(b"\x00garbage") is None
    assert peer_versions(codec.encode(info("a", "1"))) is None  # not a hello
