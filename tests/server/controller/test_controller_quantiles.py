"""Two interpolated quantiles pin order statistics (``analyses``: a quantile's order statistics are
audited as released values). On the shipped sample, the 10 % quantile of hours over ages 22-23 with
at least 32 hours (38.2, n = 142) and the 25 % quantile over ages 22-23 (38.5, n = 170) are both
computed from the adjacent order statistics 38 and 40: nobody aged 22-23 works 39 hours, a zero cell
the count rules refuse. Each quantile is refused on its own; with the gap check removed both are
released and the pair solves to 38 and 40."""

from __future__ import annotations

import pandas as pd

from petlab.plaindata import acs_sample_path
from petlab.server.controller import analyses
from petlab.server.controller.analyses import evaluate
from petlab.server.controller.public_domain import PublicDomain
from petlab.server.controller.release_history import ReleaseHistory

DATA = pd.read_csv(acs_sample_path())
DOMAIN = PublicDomain.shipped_for(DATA)
YOUNG = {"age": {"between": [22, 23]}}
SPECS = [
    (
        {
            "type": "quantiles",
            "column": "hpw",
            "probabilities": [0.1],
            "where": {**YOUNG, "hpw": {"between": [32, 99]}},
        },
        0.1,
    ),
    ({"type": "quantiles", "column": "hpw", "probabilities": [0.25], "where": YOUNG}, 0.25),
]


def pairs(quantile: float, fraction: float) -> set[tuple[int, int]]:
    """Integer order statistics lo < hi with lo + fraction (hi - lo) = quantile."""
    out = set()
    for low in range(1, int(quantile) + 1):
        high = low + (quantile - low) / fraction
        if abs(high - round(high)) < 1e-9 and low < round(high) <= 99:
            out.add((low, round(high)))
    return out


def test_two_interpolated_quantiles_do_not_show_an_empty_cell(monkeypatch):
    history = ReleaseHistory(DATA, domain=DOMAIN)
    for spec, _ in SPECS:
        reason = history.refusal(evaluate(spec, DATA, DOMAIN))
        assert reason is not None and "zero cell" in reason and "order statistics" in reason
    monkeypatch.setattr(analyses, "_order_gap", lambda *_: None)
    history = ReleaseHistory(DATA, domain=DOMAIN)
    solved = None
    for spec, fraction in SPECS:
        evaluated = evaluate(spec, DATA, DOMAIN)
        assert history.refusal(evaluated) is None
        history.record(evaluated)
        candidates = pairs(evaluated.result["quantiles"][0], fraction)
        solved = candidates if solved is None else solved & candidates
    assert solved == {(38, 40)}
    young = DATA.age.between(22, 23)
    assert (young & (DATA.hpw == 38)).any() and (young & (DATA.hpw == 40)).any()
    assert not (young & (DATA.hpw == 39)).any()  # the zero cell the two releases show
