"""Ports asked for explicitly (beyond tests/serving/test_ports.py): kept in HTTP, gRPC,
metrics order; a taken one is an environment error naming where it was asked for; a port
held only by a closed connection of a previous server (TIME_WAIT, right after a restart)
counts as free."""

from __future__ import annotations

import socket
import time

import psutil
import pytest

from deploy.pipeline.errors import ExitCode
from deploy.serving.ports import PortInUse, choose_ports, free_port, port_or_free
from deploy.serving.server_spec import ServerSpec


def distinct_free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        if (port := free_port("127.0.0.1")) not in ports:
            ports.append(port)
    return ports


def test_ports_asked_for_are_used_as_given() -> None:
    http, grpc, metrics = distinct_free_ports(3)
    spec = ServerSpec(http_port=http, grpc_port=grpc, metrics_port=metrics)
    assert choose_ports(spec, {}) == [http, grpc, metrics]
    chosen = choose_ports(ServerSpec(grpc_port=grpc), {})
    assert chosen[1] == grpc and len(set(chosen)) == 3


@pytest.mark.parametrize(
    ("origins", "named"), [({}, "server.grpc_port"), ({"grpc_port": "--grpc-port"}, "--grpc-port")]
)
def test_a_taken_port_names_where_it_was_asked_for(origins: dict[str, str], named: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUse) as raised:
            choose_ports(ServerSpec(grpc_port=port), origins)
    assert raised.value.port == port and raised.value.exit_code is ExitCode.ENVIRONMENT
    assert f"port {port} ({named}) is already in use on 127.0.0.1" in str(raised.value)
    assert f"leave {named} unset to use a free one" in str(raised.value)


def time_wait(port: int) -> bool:
    return any(
        c.laddr and c.laddr.port == port and c.status == psutil.CONN_TIME_WAIT
        for c in psutil.net_connections("tcp4")
    )


def test_a_port_held_only_by_a_closed_connection_is_free() -> None:
    with socket.socket() as listener:
        # As tritonserver's listeners: Linux lets a port in TIME_WAIT be bound again only
        # when both the old socket and the new one set SO_REUSEADDR.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server side closes first: its end, on `port`, waits in TIME_WAIT
        client.recv(1)
        client.close()
    deadline = time.monotonic() + 2
    while not time_wait(port) and time.monotonic() < deadline:
        time.sleep(0.01)  # the last ACK crosses loopback
    assert time_wait(port), "the test needs a TIME_WAIT connection on the port"
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # without SO_REUSEADDR the port looks taken
    assert port_or_free("127.0.0.1", port, "--http-port") == port
