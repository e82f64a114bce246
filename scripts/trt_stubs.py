"""Makes the `tensorrt-stubs` package usable by mypy: copies its .pyi files into
.typings/ (mypy ignores .pyi inside an installed package that has no py.typed) and
patches the generated stubs' two syntax errors. Run by scripts/setup.sh."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def site_packages() -> Path:
    return next(Path(p) for p in sys.path if (Path(p) / "tensorrt_bindings" / "tensorrt.pyi").is_file())


def patch(text: str) -> str:
    # Parameters named `in` (a keyword) in plugin methods.
    text = re.sub(r"(\(self(?:: \w+)?, )in: ", r"\1in_: ", text)
    # A parameter without default after defaulted ones: give it the default the C++ API has.
    return text.replace("power: Weights = None, channel_axis: int)", "power: Weights = None, channel_axis: int = 1)")


def main() -> None:
    try:
        source = site_packages()
    except StopIteration:
        sys.exit("tensorrt-stubs is not installed (pip install --no-deps tensorrt-stubs==10.13.0.35.1)")
    target = ROOT / ".typings"
    shutil.rmtree(target, ignore_errors=True)
    for package in ("tensorrt", "tensorrt_bindings"):
        for stub in (source / package).glob("*.pyi"):
            dest = target / package / stub.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(patch(stub.read_text()))
    print(f"tensorrt stubs ready in {target}")


if __name__ == "__main__":
    main()
