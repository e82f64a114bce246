"""The wheel installs one import package, and it works from a user's folder that holds
modules named like our layers (`pipeline.py`, `stages/`, `serving.py`, `gates.py`,
`runtimes.py`, `modelio.py`): ML projects' most common module names.

The wheel is built from this checkout and installed into a fresh venv; the venv sees
this one's site-packages (torch, ONNX, ... are not downloaded again) through a `.pth`
line, which puts them after its own: `deploy` is the wheel's, not this checkout's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, tiny_dict

pytestmark = pytest.mark.slow
# What a checkout holds beyond the sources a wheel is built from.
CHECKOUT_ONLY = (
    ".git",
    ".venv*",
    ".*cache",
    ".typings",
    "build",
    "*.egg-info",
    "__pycache__",
    "runs",
    "site",
)

# What a user's project folder holds: each would have shadowed (or broken) a layer when
# the layers were top-level packages.
USER_FILES = {
    "pipeline.py": "raise RuntimeError('the user pipeline.py was imported')\n",
    "stages/__init__.py": "raise RuntimeError('the user stages/ was imported')\n",
    "serving.py": "raise RuntimeError('the user serving.py was imported')\n",
    "gates.py": "raise RuntimeError('the user gates.py was imported')\n",
    "runtimes.py": "raise RuntimeError('the user runtimes.py was imported')\n",
    "modelio.py": "raise RuntimeError('the user modelio.py was imported')\n",
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its python."""
    work = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds, and
    # the checkout is the working directory (and so on sys.path) of the tests beside this one.
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*CHECKOUT_ONLY))
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(work.glob("deploy-*.whl"))
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"deploy"}, tops
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "deps_from_the_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return python


def _user_folder(where: Path) -> Path:
    for name, text in USER_FILES.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)
    config = tiny_dict(where)
    config["stages"] = {"export": config["stages"]["export"]}
    path = where / "tiny.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_wheel_runs_from_a_folder_with_modules_named_like_its_layers(
    installed: Path, tmp_path: Path
) -> None:
    config = _user_folder(tmp_path)
    script = (
        "import deploy, pathlib\n"
        "assert pathlib.Path(deploy.__file__).parent.parent.name == 'site-packages', deploy.__file__\n"
        "result = deploy.load('tiny.yaml').run()\n"
        "print('ok' if result.ok else 'failed', {n: s.status.value for n, s in result.stages.items()})\n"
    )
    done = subprocess.run(
        [str(installed), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith("ok") and "'export': 'ran'" in done.stdout, done.stdout
    # The console script the wheel installed, from the same folder: the run is cached.
    cli = subprocess.run(
        [str(installed.parent / "deploy"), "run", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert cli.returncode == 0 and "cached" in cli.stdout, cli.stdout[-3000:] + cli.stderr[-3000:]
