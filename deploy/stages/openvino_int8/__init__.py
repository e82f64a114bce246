"""openvino_int8: INT8 OpenVINO IR by NNCF, gated on accuracy like quantize's INT8.

stage.py        the stage: the gate
nncf_params.py  its parameters
quantizer.py    NNCF's quantization and accuracy control around the gate (imports openvino, nncf)
"""

from deploy.stages.openvino_int8.stage import SPEC

__all__ = ["SPEC"]
