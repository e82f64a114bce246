"""The names of a repository's models, built in one place: `<pipeline>_<format>` for FP32,
`<pipeline>_<format>_<precision>` otherwise (resnet50_python, resnet50_python_int8). The
stage that writes the repository and the ones that pick from it spell them alike."""

from __future__ import annotations

from deploy.domain.vocabulary import Precision, ServingFormat


def model_name(pipeline: str, fmt: ServingFormat | str, precision: Precision | str) -> str:
    suffix = "" if precision == Precision.FP32 else f"_{precision}"
    return f"{pipeline}_{fmt}{suffix}"
