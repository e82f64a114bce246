"""Which tritonserver: each kind asks for its own fields; the identity that enters the
cache key is cheap and changes when the server does; the binary is found on PATH first,
else in the nvidia-pytriton wheel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from deploy.serving.server_spec import ServerKind, ServerSpec, find_binary, identity, pytriton_root


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "binary"}, "server kind 'binary' needs path"),
        ({"kind": "docker"}, "server kind 'docker' needs image"),
        ({"kind": "url"}, "server kind 'url' needs url, grpc_url"),
        ({"kind": "url", "url": "h:8000"}, "server kind 'url' needs grpc_url"),
        ({"http_port": 0}, "greater than or equal to 1"),
        ({"grpc_port": 65536}, "less than or equal to 65535"),
        ({"startup_timeout_s": 0}, "greater than 0"),
        ({"hostname": "x"}, "Extra inputs are not permitted"),
    ],
)
def test_each_kind_needs_its_fields_and_nothing_unknown(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ServerSpec.model_validate(fields)


def test_the_defaults_start_a_local_server_on_loopback_and_free_ports() -> None:
    spec = ServerSpec()
    assert spec.kind is ServerKind.AUTO and spec.host == "127.0.0.1"
    assert (spec.http_port, spec.grpc_port, spec.metrics_port) == (None, None, None)
    with pytest.raises(ValidationError, match="frozen"):
        spec.host = "0.0.0.0"  # type: ignore[misc]


def test_only_local_binaries_list_their_backends_before_a_load() -> None:
    assert {k for k in ServerKind if k.backends_known} == {ServerKind.AUTO, ServerKind.BINARY}


def test_remote_kinds_are_identified_by_what_names_them() -> None:
    assert identity(ServerSpec(kind="docker", image="tritonserver:24.05")) == {
        "triton_server": "docker:tritonserver:24.05"
    }
    assert identity(ServerSpec(kind="url", url="h:8000", grpc_url="h:8001")) == {
        "triton_server": "url:h:8000"
    }


def test_a_binarys_identity_changes_with_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "tritonserver"
    binary.write_bytes(b"v1")
    spec = ServerSpec(kind="binary", path=binary)
    first = identity(spec)["triton_server"]
    assert first.startswith(f"{binary}:2:")
    assert identity(spec)["triton_server"] == first  # cheap and stable: no server started
    binary.write_bytes(b"version 2")
    os.utime(binary, ns=(0, binary.stat().st_mtime_ns + 1_000_000))
    assert identity(spec)["triton_server"] != first and identity(spec)["triton_server"].startswith(
        f"{binary}:9:"
    )
    assert identity(ServerSpec(kind="binary", path=tmp_path / "gone")) == {
        "triton_server": f"not found: {tmp_path / 'gone'}"
    }


def test_auto_finds_tritonserver_on_path_before_the_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    wheel = find_binary(ServerSpec())
    root = pytriton_root()
    assert root is not None and wheel == root / "tritonserver" / "bin" / "tritonserver" and wheel.is_file()
    on_path = tmp_path / "tritonserver"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert find_binary(ServerSpec()) == on_path
    assert find_binary(ServerSpec(kind="binary", path=Path("/opt/x/tritonserver"))) == Path(
        "/opt/x/tritonserver"
    )
