"""Whether the openvino stage checks the FP32 IR computed in bf16 against eager: a fact its
params state (`stages.openvino.bf16`), read by triton_config, which serves bf16 only where
that gate runs. Read through the engine (`read_fact`), never from the other stage's YAML."""

from __future__ import annotations

from deploy.pipeline.graph.facts import Fact
from deploy.pipeline.graph.registry import read_fact
from deploy.spec.config import DeployConfig

# False where no openvino stage is configured: nothing checks bf16 then.
BF16_GATED: Fact[bool] = Fact("openvino_bf16_gated", False)


def bf16_gated(config: DeployConfig) -> bool:
    return read_fact(config, BF16_GATED)
