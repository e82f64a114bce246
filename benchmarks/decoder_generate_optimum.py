"""benchmarks/decoder_generate.py's Optimum rows, run in .venv-optimum (transformers 4.57):
the trained weights saved by the parent (WORK/hf) exported by Optimum as
`text-generation-with-past` and run by ORTModelForCausalLM, timed as the parent times every
row. Prints the rows as one JSON line.

    .venv-optimum/bin/python benchmarks/decoder_generate_optimum.py WORK NEW_TOKENS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from decoder_generate import CONCURRENCY, PROMPTS, hf_runner, timed_row  # noqa: E402


def main() -> None:
    from optimum.onnxruntime import ORTModelForCausalLM

    work, new = Path(sys.argv[1]), int(sys.argv[2])
    expected = {
        tuple(int(x) for x in k.split(",")): v
        for k, v in json.loads((work / "expected.json").read_text()).items()
    }
    model = ORTModelForCausalLM.from_pretrained(work / "hf", export=True, use_cache=True)
    one = hf_runner(model, new)
    one([1, 2, 3])  # untimed: the first call's allocations
    rows = [timed_row("optimum ORT", one, p, c, expected) for p in PROMPTS for c in CONCURRENCY]
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
