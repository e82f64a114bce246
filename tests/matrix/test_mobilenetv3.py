"""configs/mobilenetv3.yaml as the Jenkins matrix runs it (tests/matrix/runs.py)."""

from __future__ import annotations

import pytest

from tests.matrix.runs import MatrixRun, check_the_run_passed, matrix_run

pytestmark = [pytest.mark.matrix]


@pytest.fixture(scope="module")
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> MatrixRun:
    return matrix_run("mobilenetv3", request, tmp_path_factory)


def test_the_run_passed(run: MatrixRun) -> None:
    check_the_run_passed(run)
