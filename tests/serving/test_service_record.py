"""The service record (serving/service_record.py): written and read by one pair of
functions through a real ModelConfig protobuf and its JSON form, versioned, and in step
with the self-contained pre / post models that read it inside the server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from deploy.serving.service import Role
from deploy.serving.service_record import (
    ClassifyRecord,
    EmbeddingRecord,
    EnsembleRecord,
    ImageRecord,
    StaleRecord,
    TextRecord,
    read_record,
    service_name,
    write_record,
)

SERVING = Path(__file__).resolve().parents[2] / "deploy" / "serving"
IMAGE = ImageRecord(
    feed="image", color="rgb", resize=256, crop=224, scale=1 / 255, mean=(0.5,) * 3, std=(0.2,) * 3,
    layout="NCHW", max_bytes=1 << 20, max_pixels=10**6,
)  # fmt: skip
TEXT = TextRecord(
    tokenizer="tokenizer.json", max_length=64, min_length=8, feeds={"input_ids": "ids"}, max_bytes=99
)
RECORDS = [
    IMAGE,
    TEXT,
    ClassifyRecord(reads="logits", softmax=True, top_k=5, labels="labels.txt"),
    EmbeddingRecord(reads="embedding", normalize=True),
    EnsembleRecord(model="m_onnx", pre="m_pre", post=None),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.kind)
def test_a_record_reads_back_from_the_protobuf_and_its_json(record) -> None:
    proto = model_config_pb2.ModelConfig(name="x")
    write_record(proto, Role.PRE, record)
    assert read_record(proto.parameters) == record
    as_json = json_format.MessageToDict(
        proto, preserving_proto_field_name=True
    )  # as a server answers GET config
    assert read_record(as_json["parameters"]) == record


def test_a_model_without_a_record_reads_none_and_another_version_is_refused() -> None:
    proto = model_config_pb2.ModelConfig(name="x")
    write_record(proto, Role.MODEL, None)
    assert read_record(proto.parameters) is None
    write_record(proto, Role.PRE, IMAGE)
    data = json.loads(proto.parameters["deploy_service"].string_value) | {"version": 0}
    proto.parameters["deploy_service"].string_value = json.dumps(data)
    with pytest.raises(StaleRecord, match="rerun triton_config"):
        read_record(proto.parameters)


@pytest.mark.parametrize(
    ("model_file", "records"),
    [("pre_model.py", (ImageRecord, TextRecord)), ("post_model.py", (ClassifyRecord, EmbeddingRecord))],
)
def test_the_models_in_the_server_read_only_fields_the_records_have(model_file: str, records: tuple) -> None:
    read = set(re.findall(r'spec(?:\["|\.get\(")(\w+)"', (SERVING / model_file).read_text()))
    fields = set().union(*(set(r.model_fields) for r in records))
    assert read and read <= fields, read - fields


def test_service_model_names() -> None:
    assert [service_name("tiny", r) for r in (Role.PRE, Role.POST)] == ["tiny_pre", "tiny_post"]
    assert service_name("tiny_python", Role.ENSEMBLE) == "tiny_python_ensemble"
