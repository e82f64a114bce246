"""Makes the `tensorrt-stubs` package usable by mypy without installing it.

The wheel declares a dependency on `tensorrt`, which cannot be installed here, and
installed as a package its .pyi files would shadow nothing but still make `import
tensorrt` succeed as an empty namespace package. So: download the wheel, copy its
.pyi files into .typings/ (named by mypy_path in pyproject.toml), and patch the two
syntax errors of the generated stubs. Run by scripts/setup.sh.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUBS = "tensorrt-stubs==10.13.0.35.1"


def patch(text: str) -> str:
    # Parameters named `in` (a keyword) in plugin methods.
    text = re.sub(r"(\(self(?:: \w+)?, )in: ", r"\1in_: ", text)
    # A parameter without a default after defaulted ones: give it the C++ API's default.
    return text.replace(
        "power: Weights = None, channel_axis: int)", "power: Weights = None, channel_axis: int = 1)"
    )


def main() -> None:
    target = ROOT / ".typings"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                tmp,
                STUBS,
            ],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".pyi") and name.split("/")[0] in ("tensorrt", "tensorrt_bindings"):
                    dest = target / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_text(patch(archive.read(name).decode()))
    print(f"{STUBS} ready for mypy in {target}")


if __name__ == "__main__":
    main()
