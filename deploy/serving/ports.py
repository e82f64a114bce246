"""The ports our tritonservers listen on: those asked for are checked (a taken one is an
error, since clients were told to use it), the rest are free ones that differ from them."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from deploy.pipeline.errors import EnvError
from deploy.serving.server_spec import ServerSpec

PORT_FIELDS = ("http_port", "grpc_port", "metrics_port")


class PortInUse(EnvError):
    """A port that was asked for (config or command line) is taken: exit 4, never a
    silent move to another port, since clients were told to use that one."""

    def __init__(self, host: str, port: int, origin: str) -> None:
        self.port = port
        super().__init__(
            f"port {port} ({origin}) is already in use on {host}; stop what listens there, "
            f"choose another port, or leave {origin} unset to use a free one"
        )


# Triton's own defaults, which clients (and `deploy infer`) try first.
CONVENTIONAL = {"http_port": 8000, "grpc_port": 8001, "metrics_port": 8002}


def conventional_ports(host: str) -> dict[str, int]:
    """Triton's default ports when all three are free on `host`; else {} (free ones then)."""
    for port in CONVENTIONAL.values():
        try:
            port_or_free(host, port, "")
        except PortInUse:
            return {}
    return dict(CONVENTIONAL)


@dataclass(frozen=True)
class PortChoice:
    """`deploy serve`'s ports: what to set on the server, who asked for each (named in a
    'port taken' error), and what to say first."""

    ports: dict[str, int]
    origins: dict[str, str]
    note: str = ""


def serve_ports(spec: ServerSpec, given: Mapping[str, int | None], key: str, config: str) -> PortChoice:
    """The options given win; else the config's; with neither, Triton's 8000-8002 where
    all three are free (where `deploy infer` looks without --url), else free ones, said.
    A taken port is named as the user gave it: the option, else the config's key."""
    ports = {name: port for name, port in given.items() if port is not None}
    origins = {
        name: "--" + name.replace("_", "-") if name in ports else f"{key}.{name} in {config}"
        for name in given
    }
    if ports or any(getattr(spec, name) is not None for name in given):
        return PortChoice(ports, origins)
    ports = conventional_ports(spec.host)
    taken = (
        ""
        if ports
        else "ports 8000-8002 are taken: serving on free ones; give `deploy infer` the --url printed below"
    )
    return PortChoice(ports, origins, taken)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_or_free(host: str, wanted: int | None, origin: str) -> int:
    """`wanted` if it can be bound, a free port when none was asked for; a taken
    `wanted` raises PortInUse naming it and `origin` (e.g. "--http-port")."""
    if wanted is None:
        return free_port(host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as the server sets it: a port held only by closed connections
        # (TIME_WAIT, e.g. right after a restart) is free; one with a listener is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, wanted))
        except OSError as exc:
            raise PortInUse(host, wanted, origin) from exc
    return wanted


def choose_ports(spec: ServerSpec, origins: Mapping[str, str]) -> list[int]:
    """HTTP, gRPC and metrics ports: the explicit ones checked (`origins` names where
    each came from, default `server.<field>`), then free ones that differ from them all."""
    explicit = {
        name: port_or_free(spec.host, getattr(spec, name), origins.get(name, f"server.{name}"))
        for name in PORT_FIELDS
        if getattr(spec, name) is not None
    }
    ports: list[int] = []
    for name in PORT_FIELDS:
        port = explicit.get(name)
        while port is None or (name not in explicit and port in [*explicit.values(), *ports]):
            port = free_port(spec.host)
        ports.append(port)
    return ports


class Probe(str, Enum):
    """What a port answered a health request with."""

    UP = "up"  # HTTP 200
    DOWN = "down"  # nothing listens yet, or an HTTP answer other than 200
    TAKEN = "taken"  # not our server: a connection to itself, a reset, a reply that is not HTTP


def probe(host_port: str, path: str, timeout_s: float = 2.0) -> Probe:
    """One health request over a plain socket, so that every way a port can answer is
    seen: a client socket whose ephemeral port equals the port it dials connects to itself
    on Linux (TCP simultaneous open) and reads back its own request, which an HTTP
    library takes for a bad status line; that port is no server's."""
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            return classify(sock, path, host_port)
    except (ConnectionRefusedError, TimeoutError):
        return Probe.DOWN
    except OSError:  # reset, unreachable: the port is not a server's that is starting
        return Probe.TAKEN


def listens(pid: int, host_port: str) -> bool:
    """Whether process `pid` holds the listening socket on host_port's port (Linux: its
    socket inodes in /proc/PID/fd against /proc/net/tcp*); True where /proc cannot tell."""
    port = int(host_port.rpartition(":")[2])
    try:
        held = _links(f"/proc/{pid}/fd")
        tables = [Path(f"/proc/net/{name}").read_text() for name in ("tcp", "tcp6")]
    except OSError:
        return True
    listening = {f"socket:[{row[9]}]" for row in _rows(tables) if _is_listener(row, port)}
    return bool(listening & held)


def _links(fd_dir: str) -> set[str]:
    """What a process's descriptors point to; one closed between the listing and its
    read is skipped (a busy server opens and closes them all the time)."""
    held = set()
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(FileNotFoundError):
            held.add(os.readlink(f"{fd_dir}/{fd}"))
    return held


def _rows(tables: list[str]) -> list[list[str]]:
    return [line.split() for table in tables for line in table.splitlines()[1:] if line.strip()]


def _is_listener(row: list[str], port: int) -> bool:
    """A /proc/net/tcp row: local address HEX:PORT, state 0A (LISTEN), inode in column 10."""
    return len(row) > 9 and row[3] == "0A" and int(row[1].rpartition(":")[2], 16) == port


def classify(sock: socket.socket, path: str, host_port: str) -> Probe:
    """A connected socket's answer to `GET path`."""
    if sock.getsockname() == sock.getpeername():
        return Probe.TAKEN
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n".encode())
    head = sock.recv(64)
    if not head:
        return Probe.DOWN  # closed before answering: a server still starting
    if not head.startswith(b"HTTP/"):
        return Probe.TAKEN
    return Probe.UP if head.split(b" ", 2)[1:2] == [b"200"] else Probe.DOWN
