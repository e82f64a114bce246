"""A small stand-in for the `tensorrt` module, for testing our logic around the build.

It implements only names that exist in tensorrt-stubs 10.13 (test_fake_follows_the_stubs
checks that), records what the stage asked for, and "builds" fixed bytes. It never
stands in for TensorRT outside tests: without the real library the stage is skipped.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any

__version__ = "10.13.0.35"
PLAN = b"\x00fake-serialized-engine\x01"
built: list[dict[str, Any]] = []


class NetworkDefinitionCreationFlag(IntEnum):
    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1


class BuilderFlag(IntEnum):
    FP16 = 0
    INT8 = 1
    VERSION_COMPATIBLE = 13


class MemoryPoolType(IntEnum):
    WORKSPACE = 0


class HardwareCompatibilityLevel(IntEnum):
    NONE = 0
    AMPERE_PLUS = 1
    SAME_COMPUTE_CAPABILITY = 2


class LayerInformationFormat(IntEnum):
    ONELINE = 0
    JSON = 1


class Dims(list):  # type: ignore[type-arg]
    """Like the stubs' Dims(shape: list[int])."""

    def __init__(self, shape: list[int]) -> None:
        assert isinstance(shape, list), "Dims takes a list[int]"
        super().__init__(shape)


class Logger:
    WARNING = 2

    def __init__(self, min_severity: int = 2) -> None:
        self.min_severity = min_severity


class ITimingCache:
    def __init__(self, previous: bytes) -> None:
        self.previous = previous

    def serialize(self) -> bytes:
        return self.previous + b"+timing"


class IOptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[Dims, Dims, Dims]] = {}

    def set_shape(self, input: str, min: Dims, opt: Dims, max: Dims) -> None:
        assert all(isinstance(d, Dims) for d in (min, opt, max)), "set_shape takes Dims"
        self.shapes[input] = (min, opt, max)


class IBuilderConfig:
    def __init__(self) -> None:
        self.flags: list[BuilderFlag] = []
        self.pools: dict[MemoryPoolType, int] = {}
        self.profiles: list[IOptimizationProfile] = []
        self.builder_optimization_level = 3
        self.hardware_compatibility_level = HardwareCompatibilityLevel.NONE
        self.cache: ITimingCache | None = None

    def set_flag(self, flag: BuilderFlag) -> None:
        self.flags.append(flag)

    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        self.pools[pool] = pool_size

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache:
        return ITimingCache(bytes(serialized_timing_cache))

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        self.cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache:
        assert self.cache is not None
        return self.cache


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags


class Builder:
    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes:
        built.append({"network_flags": network.flags, "config": config})
        return PLAN


class OnnxParser:
    def __init__(self, network: INetworkDefinition, logger: Logger) -> None:
        self.num_errors = 0

    def parse_from_file(self, model: str) -> bool:
        return model.endswith("model.onnx") or "objects" in model


class EngineInspector:
    def get_engine_information(self, format: LayerInformationFormat) -> str:
        return json.dumps({"Layers": ["fake"]})


class ICudaEngine:
    def create_engine_inspector(self) -> EngineInspector:
        return EngineInspector()


class Runtime:
    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine:
        assert serialized_engine == PLAN
        return ICudaEngine()
