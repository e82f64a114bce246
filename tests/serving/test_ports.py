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


def test_a_socket_connected_to_itself_is_a_taken_port_not_a_crash() -> None:
    """The port race `deploy serve` lost with a traceback (BadStatusLine): before the server
    listens, a loopback client whose ephemeral port equals the port it dials connects to
    itself (TCP simultaneous open) and reads back its own request. Reproduced here for
    real: a socket bound to a port, then connected to that same port."""
    from deploy.serving.ports import Probe, classify

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.connect(("127.0.0.1", port))
        assert sock.getsockname() == sock.getpeername()  # it really is connected to itself
        assert classify(sock, "/v2/health/live", f"127.0.0.1:{port}") is Probe.TAKEN


def test_a_port_that_answers_something_else_than_http_is_taken() -> None:
    import threading

    from deploy.serving.ports import Probe, probe

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

        thread = threading.Thread(target=answer)
        thread.start()
        assert probe(f"127.0.0.1:{port}", "/v2/health/live") is Probe.TAKEN
        thread.join(5)
    assert probe(f"127.0.0.1:{free_port('127.0.0.1')}", "/v2/health/live") is Probe.DOWN  # nothing listens
