"""configs/mobilenetv3.yaml as the Jenkins matrix runs it (tests/matrix/runs.py)."""

from __future__ import annotations

import pytest

from tests.matrix.runs import MatrixRun, check_the_run_passed, matrix_fixture

pytestmark = [pytest.mark.matrix]


run = matrix_fixture("mobilenetv3")


def test_the_run_passed(run: MatrixRun) -> None:
    check_the_run_passed(run)
