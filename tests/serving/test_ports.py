"""Ports for our tritonservers: an asked-for port that is taken is an error naming where
it was asked for; free ones never collide with the asked-for ones."""

from __future__ import annotations

import socket

import pytest

from deploy.serving.ports import PortInUse, choose_ports, free_port, port_or_free
from deploy.serving.server_spec import ServerSpec


def test_a_taken_port_is_an_error_naming_its_origin() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUse, match=f"port {port} \\(--http-port\\) is already in use"):
            port_or_free("127.0.0.1", port, "--http-port")


def test_no_port_asked_for_gives_a_bindable_one() -> None:
    port = port_or_free("127.0.0.1", None, "server.http_port")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: bindable


def test_free_ports_differ_from_the_asked_for_one() -> None:
    wanted = free_port("127.0.0.1")
    spec = ServerSpec(http_port=wanted)
    ports = choose_ports(spec, {})
    assert ports[0] == wanted and len(set(ports)) == len(ports) == 3
