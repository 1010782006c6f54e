"""``petlab.deferred_torch``: petlab's processes never import torch, and code that does use torch
beside petlab still gets the real module. Each case runs in a fresh interpreter (the test process
itself has imported everything already)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PETLAB_WORK_WITHOUT_TORCH = """
import numpy as np
from scipy import stats
import petlab.server.app, petlab.client.main, petlab.client.analyst, petlab.experiments.cli
from concrete import fhe
from petlab.deferred_torch import torch_is_loaded

circuit = fhe.Compiler(lambda x: (x * 3) % 7, {"x": "encrypted"}).compile(range(8))
circuit.keygen()
assert circuit.encrypt_run_decrypt(5) == 1
stats.ks_2samp(np.arange(10.0), np.arange(10.0) + 0.5)  # scipy looks for torch tensors
import importlib.util
assert importlib.util.find_spec("torch").name == "torch"  # libraries that probe for torch
print("torch loaded:", torch_is_loaded())
"""

TORCH_BESIDE_PETLAB = """
import numpy as np
import petlab
from concrete import fhe
import torch
import torch.nn
from concrete.fhe.extensions.maxpool import _EVALUATORS
from petlab.deferred_torch import torch_is_loaded

assert isinstance(torch.zeros(2), torch.Tensor) and torch.nn.Linear(2, 1)(torch.ones(2)).shape == (1,)
pooled = _EVALUATORS[1](torch.from_numpy(np.arange(4.0).reshape(1, 1, 4)), 2)
print("torch loaded:", torch_is_loaded(), pooled.tolist())
"""


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_petlab_compiles_and_runs_a_circuit_without_importing_torch():
    assert run(PETLAB_WORK_WITHOUT_TORCH) == "torch loaded: False"


@pytest.mark.slow
def test_code_that_uses_torch_beside_petlab_gets_the_real_torch():
    assert run(TORCH_BESIDE_PETLAB) == "torch loaded: True [[[1.0, 3.0]]]"
