"""ONNX models on disk as one directory: `model.onnx`, and its weights in
`model.onnx.data` beside it when they can't live inside (protobuf caps one message at
2 GB) or when the config asks for external data. Every stage that writes ONNX writes it
through here, so an artifact is always that directory and nothing else."""

from __future__ import annotations

import shutil
from enum import Enum
from pathlib import Path
from typing import Any

# protobuf's hard limit for one serialized message; weights alone close to it leave no
# room for the graph, hence the margin.
PROTOBUF_LIMIT = 2**31
MARGIN = 64 * 2**20
MODEL_FILE = "model.onnx"
DATA_SUFFIX = ".data"
# Tensors smaller than this stay inside model.onnx (shapes, small constants): what the
# ONNX tools do by default, and what keeps the graph readable without the data file.
INLINE_BELOW = 1024


class ExternalData(str, Enum):
    """Where the weights of a written model go."""

    AUTO = "auto"  # beside the model only when it would not fit in one file
    ALWAYS = "always"  # always beside it (tests it on small models; some loaders prefer it)


def weights_bytes(proto: Any) -> int:
    """The size of the graph's initializers (and of external data they point to)."""
    import onnx

    total = 0
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            total += int(next((e.value for e in tensor.external_data if e.key == "length"), 0))
        else:
            total += tensor.ByteSize()
    return total


def too_big(proto: Any) -> bool:
    return weights_bytes(proto) >= PROTOBUF_LIMIT - MARGIN


def uses_external_data(path: Path) -> bool:
    """Whether the model at `path` keeps any weights in a file beside it."""
    import onnx

    return has_external(onnx.load(str(path), load_external_data=False))


def has_external(proto: Any) -> bool:
    import onnx

    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


def save(proto: Any, path: Path, external: bool) -> None:
    """Writes `proto` (weights in memory) to `path`, its weights in `<name>.data` when
    `external` or when they would not fit. The proto's tensors point to that file
    afterwards (onnx moves them out), so callers do not reuse it for anything else."""
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    if not (external or too_big(proto)):
        onnx.save_model(proto, str(path))
        return
    data = path.with_name(path.name + DATA_SUFFIX)
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(
        proto,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=INLINE_BELOW,
    )


def rewrite(path: Path, external: bool) -> None:
    """Lays out a model some other tool wrote (the legacy exporter writes one file per
    tensor once a model passes 2 GB) as model + one data file, or inline when small."""
    import onnx

    proto = onnx.load(str(path))  # pulls every external tensor into memory
    for other in path.parent.iterdir():
        if other != path:
            other.unlink()
    save(proto, path, external)


def data_files(path: Path) -> list[str]:
    """The files the model's external tensors name, relative to its directory."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return sorted(
        {
            e.value
            for t in proto.graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL
            for e in t.external_data
            if e.key == "location"
        }
    )


def copy(source: Path, dest: Path) -> None:
    """Copies a model and the data files it names (relative to it, so they keep their
    names; the model file itself may be renamed)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    for name in data_files(source):
        shutil.copyfile(source.parent / name, dest.parent / name)


def check(path: Path) -> None:
    """onnx.checker on the file (the path form follows external data; the proto form
    cannot take a model over 2 GB)."""
    import onnx

    onnx.checker.check_model(str(path))


def fixed_dims(proto: Any, specs: Any) -> list[str]:
    """The declared dynamic dims the graph's inputs hold as fixed sizes (or lost), e.g.
    "image dim 0 ('batch') is 2": an exporter that fixed what the shape spec says varies
    (torch.export applies its own "suggested fixes" when it cannot prove a dim dynamic)."""
    graph = {i.name: i.type.tensor_type.shape.dim for i in proto.graph.input}
    found = []
    for spec in specs:
        dims = graph.get(spec.name)
        if dims is None:
            found.append(f"input '{spec.name}' is not in the graph")
            continue
        for axis, name in spec.dynamic_axes().items():
            if axis < len(dims) and not dims[axis].dim_param:
                found.append(f"{spec.name} dim {axis} ('{name}') is {dims[axis].dim_value}")
    return found
