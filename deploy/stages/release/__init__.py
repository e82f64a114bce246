"""release: the repository as built, against what is deployed, published as new versions.

stage.py       the stage: params, the gate, the report
compare.py     a model's candidate and deployed versions on the same inputs, side by side
versions.py    placing a released version into the repository (and the stamps a server check reads)
record.py      release.json: what this release did, per model (the stage's versioned record)
"""

from deploy.stages.release.stage import SPEC

__all__ = ["SPEC"]
