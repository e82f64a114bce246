"""release: the repository as built, against what is deployed, published as new versions.

stage.py       the stage: what each model's release is, what is deployed (its key)
params.py      how many versions to keep, and the gate
output.py      the gate's verdict, the versions placed, the headline and report table
compare.py     a model's candidate and deployed versions on the same inputs, side by side
versions.py    placing a released version into the repository (and the stamps a server check reads)
release_report.py  release.json: what this release did, per model (the stage's versioned record)
"""

from deploy.stages.release.stage import SPEC

__all__ = ["SPEC"]
