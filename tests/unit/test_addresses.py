"""One reading of an address (`node/addresses.py`) for the supervisor's open-cluster warning and
the API's auth: a bind address, a peer address as a dual-stack socket reports it, a host name."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from skulk.node import config
from skulk.node.addresses import is_loopback, plain_address
from skulk.services.api.http.auth import AuthMiddleware, Policy
from skulk.supervisor.node import secure_children

LOOPBACK = ("127.0.0.1", "127.9.9.9", "::1", "::1%lo", "::ffff:127.0.0.1", "::ffff:127.1.2.3", "localhost")
NOT_LOOPBACK = ("0.0.0.0", "::", "192.168.1.2", "::ffff:10.0.0.1", "fe80::1%eth0", "10.0.0.1", "",
                "nonsense", "example.com", "localhost.example.com")


@pytest.mark.parametrize("address", LOOPBACK)
def test_loopback_addresses(address):
    assert is_loopback(address)


@pytest.mark.parametrize("address", NOT_LOOPBACK)
def test_other_addresses(address):
    assert not is_loopback(address)


def test_a_mapped_address_reads_as_its_ipv4_address():
    assert plain_address("::ffff:10.0.0.2") == "10.0.0.2" and plain_address("::ffff:127.0.0.1") == "127.0.0.1"
    for given in ("10.0.0.2", "::1", "fe80::1%eth0", "nonsense"):
        assert plain_address(given) == given


def open_cluster_warned(tmp_path, monkeypatch, caplog, listen: str) -> bool:
    cfg = replace(config.load(home=tmp_path, env={}), listen=listen, cluster_key_file="")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="skulk"):
        secure_children(cfg)
    return "OPEN CLUSTER" in caplog.text


@pytest.mark.parametrize("address", ["::ffff:127.0.0.1", "127.0.0.1", "::1", "localhost", "10.0.0.1", "0.0.0.0"])
def test_the_supervisor_and_the_api_agree(tmp_path, monkeypatch, caplog, address):
    """A mapped loopback address once warned of an open cluster while the API called it loopback."""
    loopback = is_loopback(address)
    assert open_cluster_warned(tmp_path, monkeypatch, caplog, address) is not loopback
    assert Policy(listen=address).on_loopback is loopback
    auth = AuthMiddleware(Policy(listen="0.0.0.0", keys=()), {}, own_addresses=frozenset)
    assert auth._local(address) is loopback
