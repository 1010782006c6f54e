"""petlab: privacy-enhancing answers from sensitive records.

Three products over one namespace:

* encrypted k-NN classification (:mod:`petlab.crypto`, served by :mod:`petlab.server`, used from
  :mod:`petlab.client`);
* binding analysis sequences with tit-for-tat disclosure (:mod:`petlab.crypto.chain.traces`, the
  controller in :mod:`petlab.server`, the analyst in :mod:`petlab.client.analyst`);
* plain-data release mechanisms (:mod:`petlab.plaindata`);

and the experiments that compare them (:mod:`petlab.experiments`).
"""

from importlib.metadata import PackageNotFoundError, version

from petlab.deferred_torch import defer_torch

defer_torch()  # before any petlab module imports concrete: see petlab.deferred_torch

try:
    __version__ = version("petlab")
except PackageNotFoundError:  # pragma: no cover - running from a checkout without an install
    __version__ = "0+unknown"
