"""Categorical schemas: each attribute's public domain, and records as 0-based index codes.

The domains are public metadata (for ACS 2013, ``plaindata/data/acs13_domains.csv``, one attribute a
line: name, then its codes). Taking them from the private data instead would disclose which values
occur, so :func:`load_domains` is the way in; :meth:`Schema.encode` refuses values outside them.

Discretization (Bindschaedler et al., VLDB 2017, equation 7 and Section 4) maps an attribute's
values to fewer buckets for structure learning and for conditioning (parents are discretized):
``acs_discretization`` follows Section 4 (age and hours worked per week in buckets of 10, education
below a high-school diploma in one bucket and high-school diploma without a college degree in
another, SCHL codes 1-15 and 16-19); :func:`default_discretization` buckets any attribute with more
than 30 values by 10 consecutive codes and leaves the others alone.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Schema:
    names: tuple[str, ...]
    domains: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if len(self.names) != len(self.domains) or len(set(self.names)) != len(self.names):
            raise ValueError("a schema needs one domain per attribute and distinct attribute names")
        for name, domain in zip(self.names, self.domains, strict=True):
            if len(domain) < 1 or len(set(domain)) != len(domain):
                raise ValueError(f"attribute {name!r} needs a non-empty domain of distinct values")

    @property
    def cardinalities(self) -> np.ndarray:
        return np.array([len(d) for d in self.domains], dtype=np.int64)

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Records as an (n, m) int64 array of domain indices, columns in schema order."""
        missing = [n for n in self.names if n not in frame.columns]
        if missing:
            raise ValueError(f"the data lack the attributes {missing}")
        out = np.empty((len(frame), len(self.names)), dtype=np.int64)
        for j, (name, domain) in enumerate(zip(self.names, self.domains, strict=True)):
            values = frame[name].to_numpy()
            lookup = pd.Index(domain)
            index = lookup.get_indexer(values)
            if (index < 0).any():  # the values themselves are confidential: not named
                raise ValueError(
                    f"attribute {name!r} has values outside its domain (public; the values are not named)"
                )
            out[:, j] = index
        return out

    def decode(self, codes: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame(
            {
                name: np.asarray(domain)[codes[:, j]]
                for j, (name, domain) in enumerate(zip(self.names, self.domains, strict=True))
            }
        )


def load_domains(path: Path) -> Schema:
    names, domains = [], []
    with open(path, newline="") as handle:
        for line_number, row in enumerate(csv.reader(handle), start=1):
            if not row:
                continue
            try:
                domains.append(tuple(int(v) for v in row[1:]))
            except ValueError as error:
                raise ValueError(f"{path}:{line_number}: domain values must be integers ({error})") from None
            names.append(row[0])
    return Schema(tuple(names), tuple(domains))


def acs_domains_path() -> Path:
    return Path(str(resources.files("petlab.plaindata").joinpath("data/acs13_domains.csv")))


def default_discretization(schema: Schema) -> tuple[np.ndarray, ...]:
    """Index -> bucket maps: buckets of 10 consecutive codes for attributes with more than 30."""
    return tuple(np.arange(len(d)) // 10 if len(d) > 30 else np.arange(len(d)) for d in schema.domains)


def acs_discretization(schema: Schema) -> tuple[np.ndarray, ...]:
    """Section 4's bucketization for the ACS attributes; other attributes as in the default."""
    maps = list(default_discretization(schema))
    if "edu" in schema.names:
        j = schema.names.index("edu")
        codes = np.asarray(schema.domains[j])
        bucket = np.where(codes <= 15, 0, np.where(codes <= 19, 1, codes - 18))
        maps[j] = np.unique(bucket, return_inverse=True)[1]
    return tuple(maps)
