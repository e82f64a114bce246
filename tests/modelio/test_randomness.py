"""Whether a forward is a function of its inputs (modelio/randomness.py), on real modules:
a coin that fell the same way on the first two calls, and a forward that counts its calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deploy.modelio import randomness


class Coin(torch.nn.Module):
    """Keeps each sample with probability 1/2: at batch 1, one draw decides the whole answer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = (torch.rand(x.shape[0], 1) > 0.5).float()
        return self.fc(x) * keep


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x) * self.calls


def _caller(model: torch.nn.Module, x: torch.Tensor):
    def call() -> dict[str, np.ndarray]:
        with torch.no_grad():
            return {"y": model(x).numpy()}

    return call


def _seed_where_two_calls_agree(model: torch.nn.Module, x: torch.Tensor) -> int:
    call = _caller(model, x)
    for seed in range(100):
        torch.manual_seed(seed)
        first, second = call(), call()
        if np.array_equal(first["y"], second["y"]):
            return seed
    raise AssertionError("no seed where the coin fell the same way twice")


def test_a_coin_that_fell_the_same_way_twice_is_still_named() -> None:
    model, x = Coin().eval(), torch.randn(1, 4)
    call = _caller(model, x)
    torch.manual_seed(_seed_where_two_calls_agree(model, x))
    first = call()
    spread = randomness.repeat_spread(first, call())
    assert spread == {"y": 0.0}  # the two calls agreed: the old check passed this model
    with pytest.raises(randomness.NotDeterministic, match=r"it ran rand .*test_randomness.py:\d+: keep = "):
        randomness.refuse_noise(spread, first, call)


def test_a_deterministic_forward_that_runs_no_random_op_passes() -> None:
    model, x = torch.nn.Linear(4, 3).eval(), torch.randn(2, 4)
    call = _caller(model, x)
    first = call()
    randomness.refuse_noise(randomness.repeat_spread(first, call()), first, call)  # no error


def test_a_forward_that_counts_its_calls_is_named_as_state_not_noise() -> None:
    model, x = Counter().eval(), torch.randn(2, 4)
    call = _caller(model, x)
    first = call()
    with pytest.raises(randomness.NotDeterministic) as info:
        randomness.refuse_noise(randomness.repeat_spread(first, call()), first, call)
    text = str(info.value)
    assert "it ran no random op: something the forward keeps between calls changed its answer" in text
    assert "draws noise" not in text


def test_a_deterministic_forward_leaves_ctrl_c_its_exit_code(tmp_path) -> None:
    """The op-finding dispatch mode runs only for a forward that moved: after it, torch makes
    an uncaught KeyboardInterrupt exit 1 instead of 130, and a shell would read a failure."""
    import signal
    import subprocess
    import sys

    from tests.helpers import ROOT

    script = (
        "import torch\nfrom deploy.modelio import randomness\n"
        "model = torch.nn.Linear(4, 3)\nx = torch.randn(2, 4)\n"
        "call = lambda: {'y': model(x).detach().numpy()}\nfirst = call()\n"
        "randomness.refuse_noise(randomness.repeat_spread(first, call()), first, call)\n"
        "raise KeyboardInterrupt\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr)  # a shell's 130, not 1
