"""Plain-data release mechanisms (noise and synthetic data) for comparison.

``plaindata/data/acs13_sample.csv`` is a seeded 5,000-record sample of the ACS 2013 extract in
``../shared/data/acs13.csv`` (rows ``numpy.random.default_rng(2013).choice(100000, 5000,
replace=False)``, in their original order), shipped so demos and tests run anywhere.
"""

from importlib import resources
from pathlib import Path


def acs_sample_path() -> Path:
    return Path(str(resources.files("petlab.plaindata").joinpath("data/acs13_sample.csv")))
