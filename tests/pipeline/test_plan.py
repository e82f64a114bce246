"""`deploy plan` predicts what `deploy run` then does: on an empty cache, after a run
(TensorRT's build is a remembered skip here), after one parameter edit, after an
upstream edit; plus --json and --detailed-exitcode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.pipeline.errors import ExitCode
from deploy.pipeline.graph.plan import Action, make_plan
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.store.objects import Store
from tests.helpers import Cli, run, statuses

# What each prediction allows the run to do.
ALLOWED = {
    Action.CACHED: {"cached"},
    Action.SKIP: {"skipped"},
    Action.RUN: {"ran", "skipped", "failed"},  # it runs; the stage itself may decide to skip
    Action.PENDING: {"ran", "cached", "skipped"},
}
WITH_BUILD = {
    "stages": {
        "build": {"required": False},
        "validate": {"runtimes": ["onnxruntime", "tensorrt"]},
        "triton_config": {"formats": ["onnx", "python", "plan"]},
    }
}


def predicted(path: Path) -> dict[str, Action]:
    project = load_project(path)
    return {row.name: row.action for row in make_plan(project, Store(project.cache_dir))}


def plan_then_run(path: Path) -> tuple[dict[str, Action], dict[str, str]]:
    plan = predicted(path)
    actual = statuses(run(path))
    wrong = {n: (plan[n].value, actual[n]) for n in plan if actual[n] not in ALLOWED[plan[n]]}
    assert not wrong, f"plan vs run disagree: {wrong}"
    return plan, actual


@pytest.fixture
def config(write_config) -> Path:
    return write_config(WITH_BUILD)


def test_empty_cache_every_stage_certainly_runs(config):
    plan, actual = plan_then_run(config)
    assert set(plan.values()) == {Action.RUN}, plan
    assert actual["build"] == "skipped" and {s for n, s in actual.items() if n != "build"} == {"ran"}


def test_after_a_run_plan_says_exactly_what_run_does(config):
    run(config)
    plan, actual = plan_then_run(config)
    assert plan["build"] is Action.SKIP and actual["build"] == "skipped"
    assert {n for n, a in plan.items() if a is not Action.CACHED} == {"build"}, plan
    assert {n: s for n, s in actual.items() if n != "build"} == dict.fromkeys(
        plan.keys() - {"build"}, "cached"
    )


def test_one_param_edit_runs_only_that_stage(config, write_config):
    run(config)
    edited = write_config(
        {
            **WITH_BUILD,
            "stages": {
                **WITH_BUILD["stages"],
                "validate": {"runtimes": ["onnxruntime", "tensorrt"], "atol": 0.001},
            },
        }
    )
    plan, actual = plan_then_run(edited)
    assert {n for n, a in plan.items() if a is Action.RUN} == {"validate"} and actual["validate"] == "ran"


def test_an_upstream_edit_marks_only_what_could_still_hit_as_pending(config, write_config):
    run(config)
    edited = write_config({**WITH_BUILD, "stages": {**WITH_BUILD["stages"], "export": {"opset": 18}}})
    plan, actual = plan_then_run(edited)
    assert plan["trace"] is Action.CACHED and plan["export"] is Action.RUN
    assert plan["simplify"] is Action.PENDING  # same params: it hits if export's ONNX comes out the same
    assert actual["export"] == "ran"


def test_a_stage_whose_own_params_changed_behind_a_rerunning_upstream_certainly_runs(config, write_config):
    run(config)
    stages = {
        **WITH_BUILD["stages"],
        "export": {"opset": 18},
        "validate": {"runtimes": ["onnxruntime", "tensorrt"], "atol": 0.001},
    }
    plan, actual = plan_then_run(write_config({"stages": stages}))
    assert plan["validate"] is Action.RUN and actual["validate"] == "ran"


def test_plan_json_and_detailed_exit_code(config, write_config, cli: Cli):
    fresh = cli("plan", str(config), "--json", "--detailed-exitcode")
    assert fresh.returncode == ExitCode.WILL_RUN
    rows = json.loads(fresh.stdout)
    assert [r["stage"] for r in rows] == load_project(config).graph.names() and {
        r["action"] for r in rows
    } == {"run"}
    assert cli("run", str(config)).returncode == 0
    done = cli("plan", str(config), "--json", "--detailed-exitcode")
    assert done.returncode == 0 and {r["action"] for r in json.loads(done.stdout)} == {"cached", "skip"}
    assert cli("plan", str(config)).returncode == 0  # without the flag, changes are not an error


def test_a_repository_without_the_cached_tree_is_work_the_next_run_does(config, cli: Cli) -> None:
    """Every stage cached and the repository deleted (or a run stopped before its verdict
    could publish): `plan --detailed-exitcode` said 0, nothing to do, and a CI job that
    skips on 0 left the repository without its models. It says what the next run publishes."""
    import shutil

    assert cli("run", str(config)).returncode == 0
    repository = load_project(config).config.repository
    assert cli("plan", str(config), "--detailed-exitcode").returncode == 0  # in place
    shutil.rmtree(repository)
    said = cli("plan", str(config), "--detailed-exitcode")
    assert said.returncode == ExitCode.WILL_RUN, said.stdout + said.stderr
    assert (
        f"{repository} does not hold triton_config's cached repository: the next run publishes it"
        in " ".join(said.stderr.split())
    )
    assert cli("run", str(config)).returncode == 0 and (repository / "tiny_python").is_dir()
    assert cli("plan", str(config), "--detailed-exitcode").returncode == 0
