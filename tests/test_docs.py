"""The README and the documentation site (docs/, mkdocs.yml): the README stays what a newcomer
reads first and names the exact test command CI runs; every relative link resolves; every
page is in the site's nav; the config fragments the how-tos show are real (a fragment of a
config in configs/ equals that config's keys, any other validates merged into the tiny one);
the Jenkins steps the README and the how-to list are the same. `mkdocs build --strict` (in
.ci/run) checks links between pages and their anchors too; this test needs no MkDocs."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.helpers import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
MAX_README_LINES = 250

# [text](target) and [text]: target, outside fenced code blocks and code spans.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans (where a link is a link)."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def relative_links(path: Path) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    targets = INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)
    return [t for t in targets if not urlsplit(t).scheme and not t.startswith(("#", "//", "mailto:"))]


def ci_test_command() -> str:
    """The line of .ci/run that sets up and runs the tests."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    found = [line.strip() for line in lines if "-m pytest" in line and not line.lstrip().startswith("#")]
    # the README's command first, then the configs' checks (what the Jenkins matrix runs)
    assert found[1:] == [".venv/bin/python -m pytest -m matrix"], found
    return found[0]


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_shows_the_exact_ci_test_command():
    """CI runs what the README tells a newcomer to run, to the character, in its own block."""
    command = ci_test_command()
    assert command == "scripts/setup.sh --tests && .venv/bin/python -m pytest"
    assert command in [block.strip() for block in fenced(README.read_text(encoding="utf-8"), "bash")]


def test_the_readme_shows_the_setup_and_run_command():
    blocks = [b.strip() for b in fenced(README.read_text(encoding="utf-8"), "bash")]
    assert "scripts/setup.sh && .venv/bin/deploy run configs/resnet50.yaml" in blocks


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(path: Path):
    links = relative_links(path)
    missing = [
        link
        for link in links
        if not (path.parent / unquote(urlsplit(link).path)).resolve().exists()
        and urlsplit(link).path  # a bare "#anchor" was filtered out already
    ]
    assert not missing, f"{path.relative_to(ROOT)}: links to missing files: {missing}"


def test_the_readme_links_into_the_docs():
    targets = {(ROOT / urlsplit(link).path).resolve() for link in relative_links(README)}
    assert (DOCS / "index.md").resolve() in targets and (DOCS / "getting-started.md").resolve() in targets


def test_the_link_finder_finds_links():
    text = (
        "see [a](x.md), [b](../y.md#z) and `[no](code.md)`, ![img](p.png), [w](https://e.org)\n\n[r]: r.md\n"
    )
    assert sorted(INLINE_LINK.findall(prose(text)) + REFERENCE_LINK.findall(prose(text))) == sorted(
        ["x.md", "../y.md#z", "p.png", "https://e.org", "r.md"]
    )
    assert "code.md" not in prose("```\n[a](code.md)\n```\n")


def _nav_files(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return []


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs" and config.get("strict") is True
    nav = _nav_files(config["nav"])
    assert len(nav) == len(set(nav))
    assert sorted(nav) == sorted(str(p.relative_to(DOCS)) for p in PAGES)


def test_the_api_page_documents_the_api_module():
    text = (DOCS / "reference" / "python-api.md").read_text()
    assert re.search(r"^::: deploy\.api$", text, re.M)
    import deploy

    api_members = re.search(r"^::: deploy\.api\n(?:    .*\n)*", text, re.M)
    assert api_members
    documented = set(re.findall(r"^        - (\w+)$", api_members.group(0), re.M))
    documented |= {path.rsplit(".", 1)[-1] for path in re.findall(r"^::: (deploy\.[\w.]+)$", text, re.M)}
    missing = [name for name in deploy.__all__ if name not in documented]
    assert not missing, f"deploy.{missing} missing from docs/reference/python-api.md"


def test_the_jenkins_steps_are_the_same_in_the_readme_and_the_how_to():
    """tests/test_jenkinsfile.py checks the README's list against the Jenkinsfile."""

    def steps(path: Path) -> str:
        text = path.read_text(encoding="utf-8")
        found = re.search(r"step of the job, in order.*?\n```[a-z]*\n(.*?)\n```", text, re.S)
        assert found, path
        return found.group(1)

    assert steps(README) == steps(DOCS / "how-to" / "jenkins.md")


PAGE_BASE = "# on this page's config"
# Where a page's config lives, when not beside configs/tiny.yaml: its relative paths start there
# (the decoders page runs its commands from the checkout's root, where init writes zen.yaml).
PAGE_CONFIG = {"decoders.md": "zen.yaml"}


def _tiny() -> dict:
    """configs/tiny.yaml, its model file's path absolute: a page's config may live elsewhere."""
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["model"]["file"] = str(ROOT / "configs" / data["model"]["file"])
    return data


def _how_to_fragments():
    for page in sorted((DOCS / "how-to").glob("*.md")):
        for index, block in enumerate(fenced(page.read_text(encoding="utf-8"), "yaml")):
            yield pytest.param(page, block, id=f"{page.stem}-{index}")


@pytest.mark.parametrize(("page", "block"), list(_how_to_fragments()))
def test_how_to_config_fragments_are_real(page: Path, block: str, tmp_path):
    """A fragment headed `# configs/NAME.yaml` shows that config's own keys as they are;
    any other, merged into configs/tiny.yaml, makes a config that loads."""
    from deploy.pipeline.graph.project import project_from

    fragment = yaml.safe_load(block)
    assert isinstance(fragment, dict) and fragment, page
    source = re.match(r"#\s*(configs/\S+\.yaml)\s*\n", block)
    if source:
        config = yaml.safe_load((ROOT / source.group(1)).read_text())
        for key, value in fragment.items():
            if key == "stages":
                for stage, params in value.items():
                    assert params == config["stages"][stage], (page.name, stage)
            else:
                assert value == config[key], (page.name, key)
        return
    data = copy.deepcopy(_tiny())
    # A fragment for this page's own model (a decoder's select objectives) goes on top of the
    # page's first block, the whole config it shows.
    bases = (
        [yaml.safe_load(fenced(page.read_text(encoding="utf-8"), "yaml")[0])]
        if block.startswith(PAGE_BASE)
        else []
    )
    for part in [*bases, fragment]:
        for key, value in part.items():
            if key == "stages":
                data["stages"].update(value)
            else:
                data[key] = value
    where = ROOT / PAGE_CONFIG.get(page.name, "configs/tiny.yaml")
    project = project_from(data, where, tmp_path / "cache")
    assert set(fragment.get("stages", {})) <= set(project.graph.names())
