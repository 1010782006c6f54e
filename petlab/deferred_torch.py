"""Keep torch out of petlab's processes: concrete-python imports it, petlab never uses it.

concrete-python imports torch at ``import concrete.fhe`` only for its convolution and max-pool
extensions (``concrete/fhe/extensions/convolution.py``, ``maxpool.py``), which no petlab circuit
calls. That import is about 2 s of CPU in every process that touches concrete: each server, each
``petlab-client`` run, each Dask worker, each test that starts one (measured with
``python -X importtime -c "import concrete.fhe"``: torch is 2.2 s of its 3.2 s on this machine).

:func:`defer_torch` (called by ``petlab/__init__.py``, so before any petlab module imports
concrete) puts a stand-in for ``torch`` in ``sys.modules``. The three max-pool functions that
concrete reads into a table at import time are deferred calls; any other attribute, and
``Tensor`` (asked by libraries that look for torch tensors, see :class:`_NoTensorYet`) answers a
class nothing is an instance of; any other attribute, and ``__path__`` (what ``import torch.nn``
asks first), imports the real torch, which then replaces the
stand-in in ``sys.modules`` and answers every later attribute. So code that does use torch in the
same process works as before, only paying the import when it first needs it;
``tests/test_deferred_torch.py`` shows both sides. Other dunder names (``__file__``, which
``inspect.getmodule`` asks of every module) answer "absent" without importing anything.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

# what concrete's extensions read from torch while concrete is being imported
_READ_AT_CONCRETE_IMPORT = frozenset({"max_pool1d", "max_pool2d", "max_pool3d"})


class _NoTensorYet:
    """``torch.Tensor`` while torch is not imported: no object is an instance of it, as no torch
    tensor can exist before torch is imported. Libraries that look for torch tensors without
    importing torch (scipy's and scikit-learn's array-API helpers, matplotlib) ask
    ``sys.modules["torch"].Tensor``; this answer spares them the import."""


class _TorchOnFirstUse(types.ModuleType):
    """``torch`` until first real use; then a view of the real module."""

    def __init__(self) -> None:
        super().__init__("torch", "stands in for torch until first use (petlab.deferred_torch)")
        self._real: types.ModuleType | None = None
        # the real module's spec (found on the path, nothing imported), so that
        # importlib.util.find_spec("torch"), which reads sys.modules first, still answers
        self.__spec__ = importlib.util.find_spec("torch")

    def _load(self) -> types.ModuleType:
        if self._real is None:
            if sys.modules.get("torch") is self:
                del sys.modules["torch"]
            self._real = importlib.import_module("torch")
        return self._real

    def _deferred(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(self._load(), name)(*args, **kwargs)

        call.__name__ = name
        return call

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__path__":
            raise AttributeError(name)
        if self._real is None and name in _READ_AT_CONCRETE_IMPORT:
            return self._deferred(name)
        if self._real is None and name == "Tensor":
            return _NoTensorYet
        return getattr(self._load(), name)


def defer_torch() -> None:
    """Install the stand-in, unless torch or concrete is already imported (then it is too late to
    save anything, and the real module must stay what every holder sees)."""
    if "torch" not in sys.modules and "concrete.fhe" not in sys.modules:
        sys.modules["torch"] = _TorchOnFirstUse()


def torch_is_loaded() -> bool:
    """Whether the real torch has been imported in this process."""
    module = sys.modules.get("torch")
    return module is not None and not isinstance(module, _TorchOnFirstUse)
