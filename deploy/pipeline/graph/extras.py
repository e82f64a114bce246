"""Which optional extra of the `deploy` distribution brings an importable module, and how
to install it the way this deploy was installed: a checkout set up by scripts/setup.sh
installs every extra; an installed wheel takes `pip install 'deploy[EXTRA]'`."""

from __future__ import annotations

from pathlib import Path

EXTRA_OF = {  # top-level module -> the extra in pyproject.toml that installs it
    "torch": "torch",
    "torchvision": "torch",
    "safetensors": "torch",
    "cloudpickle": "torch",
    "numpy": "torch",  # torch and onnx both bring it
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "onnxsim": "onnx",
    "onnxscript": "onnx",
    "onnxconverter_common": "onnx",
    "onnx_tool": "onnx",
    "PIL": "onnx",
    "tritonclient": "triton",
    "pytriton": "triton",
    "matplotlib": "report",
    "openvino": "openvino",
    "nncf": "openvino",
    "fsspec": "remote",
    "s3fs": "remote",
}
DISTRIBUTION_OF = {
    "PIL": "pillow",
    "pytriton": "nvidia-pytriton",
    "onnxconverter_common": "onnxconverter-common",
}


def checkout() -> Path | None:
    """The source checkout deploy runs from (an editable install), if it is one."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "scripts" / "setup.sh").is_file() and (root / "pyproject.toml").is_file() else None


def install_hint(module: str) -> str:
    """How to get `module` (its top-level name), for the way deploy was installed."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return f"pip install {DISTRIBUTION_OF.get(top, top)}"
    root = checkout()
    if root is not None:
        return f"{root / 'scripts' / 'setup.sh'} (installs every extra), or pip install -e '{root}[{extra}]'"
    return f"pip install 'deploy[{extra}]'"
