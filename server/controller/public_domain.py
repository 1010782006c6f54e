"""The public attribute domain the controller reasons about: per column, the values a
record may take, from a public file, never from the confidential records.

A query set's *definition* is a box of this domain (per column, the domain values its ``where``
and its cell admit; ``analyses.definition``), so two definitions are equal exactly when they
select the same cells of the domain: ``hpw in [40, 51]`` and ``hpw = 40`` differ when 51 is in
the domain, whether or not a record works 51 hours. Values present in the data would make that
comparison a figure of the records (both counts released would show that nobody
works 51 hours).

The file is the format of ``plaindata/data/acs13_domains.csv``: one line per column, its name then
its values. Every column of the data must be listed and every value of the data must lie in its
column's domain (checked at start; the message names the column, never a value).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from petlab.plaindata.plausible.tabular_schema import acs_domains_path


def label(value) -> str:
    """A value's canonical text (integral floats as integers): definitions and domains compare
    values by it."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return repr(value)


@dataclass(frozen=True)
class PublicDomain:
    """Per column, its values in the file's order (numbers where they parse as numbers)."""

    values: dict[str, tuple]

    def __post_init__(self) -> None:
        for column, values in self.values.items():
            if not values:
                raise ValueError(f"the public domain of column {column!r} is empty")
            if len({label(v) for v in values}) != len(values):
                raise ValueError(f"the public domain of column {column!r} lists a value twice")

    @classmethod
    def load(cls, path: Path) -> PublicDomain:
        values: dict[str, tuple] = {}
        try:
            with path.open(newline="") as handle:
                for row in csv.reader(handle):
                    if not row or not row[0].strip():
                        continue
                    values[row[0].strip()] = tuple(_number(v.strip()) for v in row[1:] if v.strip())
        except (OSError, csv.Error) as exc:
            raise ValueError(f"cannot read the public domain {path}: {exc}") from None
        return cls(values)

    @classmethod
    def shipped_for(cls, data: pd.DataFrame) -> PublicDomain | None:
        """The shipped ACS 2013 domain (public) when the data has exactly its columns, else None."""
        domain = cls.load(acs_domains_path())
        return domain if list(domain.values) == list(data.columns) else None

    def check_covers(self, data: pd.DataFrame) -> None:
        """Raise unless every column of ``data`` is listed and holds only domain values. The
        message names the column only (a value outside the domain is a figure of a record)."""
        for column in data.columns:
            if column not in self.values:
                raise ValueError(f"the public domain lists no column {column!r} of the analysis data")
            known = {label(v) for v in self.values[column]}
            if not all(label(v) in known for v in pd.unique(data[column])):
                raise ValueError(f"a value of column {column!r} lies outside its public domain")

    def size(self, column: str) -> int:
        return len(self.values[column])


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text
