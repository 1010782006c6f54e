"""The exact audit's pieces against brute force in exact rationals: arithmetic modulo primes, the
search for a small determined group, the split certificate, and the whole audit on random released
systems, including weighted functionals (regressions)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
from audit_spaces import null_space, random_forms
from hypothesis import given, settings
from hypothesis import strategies as st

from petlab.server.controller.modular import (
    is_prime,
    left_null_space,
    matmul,
    miss_probability,
    random_prime,
    residues,
    rref,
    times_bits,
)
from petlab.server.controller.release_audit import Functional, ReleaseAudit
from petlab.server.controller.small_groups import find_group

P = random_prime(np.random.default_rng(0))


def rational_rank(rows: list[list[Fraction]]) -> int:
    rows = [list(r) for r in rows]
    rank = 0
    for column in range(len(rows[0]) if rows else 0):
        pivot = next((i for i in range(rank, len(rows)) if rows[i][column]), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for i in range(len(rows)):
            if i != rank and rows[i][column]:
                factor = rows[i][column] / rows[rank][column]
                rows[i] = [a - factor * b for a, b in zip(rows[i], rows[rank], strict=True)]
        rank += 1
    return rank


def brute_force_group(rows: list[list[Fraction]], n: int, t: int) -> tuple | None:
    """A union of small atoms (< t records) whose indicator is in the rational row space, by trying
    every union; rows over the records, the universe included."""
    signature: dict[tuple, list[int]] = {}
    for j in range(n):
        signature.setdefault(tuple(row[j] for row in rows), []).append(j)
    small = [atom for atom in signature.values() if len(atom) < t]
    base = rational_rank(rows)
    for k in range(1, t):
        for union in itertools.combinations(small, k):
            members = {j for atom in union for j in atom}
            if (
                len(members) < t
                and rational_rank([*rows, [Fraction(int(j in members)) for j in range(n)]]) == base
            ):
                return union
    return None


def determined_small_group(rows: list[list[Fraction]], n: int, t: int) -> tuple | None:
    """:func:`brute_force_group` by the kernel: a union U of small atoms is determined exactly
    when 1_U is orthogonal to every x with M x = 0 (one rational elimination, then sums)."""
    kernel = null_space(rows, n)
    signature: dict[tuple, list[int]] = {}
    for j in range(n):
        signature.setdefault(tuple(row[j] for row in rows), []).append(j)
    small = [atom for atom in signature.values() if len(atom) < t]
    sums = [tuple(sum(x[j] for j in atom) for x in kernel) for atom in small]
    last: dict[tuple, list[int]] = {}  # the union's last atom, found by its negated sums
    for i, total in enumerate(sums):
        last.setdefault(tuple(-v for v in total), []).append(i)
    for k in range(1, t):
        for head in itertools.combinations(range(len(small)), k - 1):
            total = tuple(sum(v) for v in zip(*(sums[i] for i in head), strict=True)) or (0,) * len(kernel)
            for i in last.get(total, []):
                union = [*head, i]
                if len(set(union)) == k and sum(len(small[a]) for a in union) < t:
                    return tuple(small[a] for a in union)
    return None


def test_primes_and_the_error_bound():
    assert [n for n in range(30) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    small_primes = [q for q in range(2, 46_341) if all(q % r for r in range(2, int(q**0.5) + 1))]
    rng = np.random.default_rng(5)
    for n in [2_147_483_647, 2_147_483_649, *rng.integers(1 << 30, 1 << 31, size=300).tolist()]:
        assert is_prime(n) == all(n % q for q in small_primes)  # trial division up to sqrt(2^31)
    assert (1 << 30) <= P < (1 << 31) and is_prime(P)
    # 2,000 rows over 100,000 records: at most (r / 2) log2 N bits of Delta
    bound = miss_probability(2000 * 0.5 * np.log2(100_000), 2)
    assert bound < 3e-10 and miss_probability(2000 * 0.5 * np.log2(100_000), 1) < 2e-5


def test_exact_products_and_residues():
    rng = np.random.default_rng(1)
    a = rng.integers(0, P, size=(3, 70))
    b = rng.integers(0, P, size=(70, 5))
    bits = rng.integers(0, 2, size=(70, 9000))
    expected = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(70)) % P for j in range(5)] for i in range(3)]
    assert matmul(a, b, P).tolist() == expected
    by_bits = times_bits(a, bits, P)
    assert by_bits[:, :40].tolist() == [
        [sum(int(a[i, k]) * int(bits[k, j]) for k in range(70)) % P for j in range(40)] for i in range(3)
    ]
    values, log2_denominator = residues(np.array([0.5, -1.25, 3.0, 0.5]), P)
    assert log2_denominator == 2
    assert [int(v) * d % P for v, d in zip(values, (2, 4, 1, 2), strict=True)] == [1, (-5) % P, 3, 1]


def test_rref_and_left_null_space_modulo_p():
    rng = np.random.default_rng(2)
    m = rng.integers(0, 3, size=(6, 9)) @ rng.integers(0, 2, size=(9, 11))  # rank <= 6
    reduced, pivots = rref(m, P)
    assert len(reduced) == rational_rank([[Fraction(int(v)) for v in row] for row in m])
    assert np.all(reduced[np.arange(len(pivots)), pivots] == 1)
    null = left_null_space(m[:, :4], P)
    assert np.all(matmul(null, m[:, :4] % P, P) == 0) and len(null) == 6 - len(rref(m[:, :4], P)[0])


@settings(max_examples=30)
@given(st.integers(0, 2**32 - 1))
def test_the_search_equals_brute_force(seed):
    """Structured spaces (small integer combinations of sparse 0/1 patterns, sometimes with a small
    group planted): find_group finds a small 0/1 vector exactly when one exists."""
    rng = np.random.default_rng(seed)
    d, w, t = int(rng.integers(1, 13)), int(rng.integers(4, 40)), int(rng.integers(2, 8))
    patterns = (rng.random((d + 2, w)) < rng.uniform(0.05, 0.5)).astype(np.int64)
    if rng.random() < 0.5:
        patterns[0] = 0
        patterns[0, rng.choice(w, size=int(rng.integers(1, 3)), replace=False)] = 1
    rows = (rng.integers(-1, 2, size=(d, d + 2)) @ patterns) % P
    sizes = rng.integers(1, t, size=w)
    found = find_group(rows, sizes, t, P)
    basis, _ = rref(rows, P)
    exists = any(
        np.all(np.isin(combined := basis[list(subset)].sum(axis=0) % P, (0, 1)))
        and sizes[combined == 1].sum() < t
        for k in range(1, len(basis) + 1)
        for subset in itertools.combinations(range(len(basis)), k)
    )
    assert (found is not None) == exists
    if found is not None:
        z = np.zeros(w, dtype=np.int64)
        z[found] = 1
        assert 0 < sizes[found].sum() < t and len(rref(np.vstack([basis, z]), P)[0]) == len(basis)


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1))
def test_the_audit_equals_brute_force(seed):
    """Random released systems over 8 to 14 records (sets, sets weighed by a column as sums and
    regressions release, and by a product of columns, "w*z", as regressions' X^T X does), part
    recorded and part checked: the audit refuses exactly when a union of small atoms (fewer than t
    records) is determined over the rationals."""
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(8, 15)), int(rng.integers(2, 5))
    data = pd.DataFrame({"w": rng.integers(1, 4, size=n), "z": rng.integers(-2, 3, size=n) / 2})
    audit = ReleaseAudit(data, t, primes=(P,))
    functionals, rows = [], [[Fraction(1)] * n]
    for _ in range(int(rng.integers(1, 7))):
        members = rng.random(n) < rng.uniform(0.2, 0.8)
        weight = rng.choice(np.array([None, None, "w", "z", "w*z"], dtype=object))
        functionals.append(Functional.of(members, weight))
        scale = np.prod([data[c].to_numpy() for c in weight.split("*")], axis=0) if weight else np.ones(n)
        rows.append([Fraction(float(v)) if m else Fraction(0) for v, m in zip(scale, members, strict=True)])
    recorded = int(rng.integers(0, len(functionals) + 1))
    audit.record(functionals[:recorded])
    finding = audit.check(functionals[recorded:])
    truth = brute_force_group(rows, n, t)
    assert (finding is not None) == (truth is not None), (finding, truth)
    if finding is not None:
        assert 1 <= finding.group_size < t


def weighted_row(data: pd.DataFrame, functional: Functional) -> list[Fraction]:
    n = len(data)
    members = np.unpackbits(functional.members, count=n).astype(bool)
    weight = functional.weight
    scale = np.prod([data[c].to_numpy() for c in weight.split("*")], axis=0) if weight else np.ones(n)
    return [Fraction(float(v)) if m else Fraction(0) for v, m in zip(scale, members, strict=True)]


def test_the_certificates_never_release_a_determined_group():
    """Step by step (check, then record what passed), on 24 random histories over 16 to 32
    records (``audit_spaces.random_forms``: sets, blocks of consecutive records, sums and
    products): every release that the split certificate or the column certificate passes without
    a search leaves no union of small atoms determined over the rationals (brute force). The
    histories are fine enough that the audit refuses 16 of their 139 steps, and each certificate
    decides some 20 of them."""
    decided = {"splits": 0, "columns": 0}
    for seed in range(24):
        rng = np.random.default_rng(seed)
        n, t = int(rng.integers(16, 33)), int(rng.integers(2, 5))
        data = pd.DataFrame({"w": rng.integers(1, 4, size=n), "z": rng.integers(-2, 3, size=n) / 2})
        audit = ReleaseAudit(data, t, primes=(P,))
        rows = [[Fraction(1)] * n]
        for _ in range(int(rng.integers(3, 10))):
            forms = random_forms(rng, data, int(rng.integers(1, 3)))
            finding = audit.check(forms)
            new_rows = rows + [weighted_row(data, f) for f in forms]
            if audit.certificate:
                decided[audit.certificate] += 1
                assert finding is None and determined_small_group(new_rows, n, t) is None
            if finding is None:
                audit.record(forms)
                rows = new_rows
    assert decided["splits"] >= 15 and decided["columns"] >= 15, decided  # 23 and 26


def test_the_search_has_no_budget():
    """A structured space (a dense 3 x 4 block tiled six times) is searched to its end, with no
    budget to stop it, and the answer agrees with brute force."""
    dense = np.array([[1, 1, 2, 0], [0, 1, 1, 1], [1, 0, 3, 1]], dtype=np.int64)
    rows = np.tile(dense, (1, 6))
    spent = [0, 0.0]
    found = find_group(rows, np.ones(24, dtype=np.int64), 10, P, spent)
    assert spent[0] > 1
    truth = brute_force_group([[Fraction(int(v)) for v in row] for row in rows], 24, 10)
    assert (found is None) == (truth is None)


def test_state_is_packed_bits_and_atoms():
    """What the audit keeps: m packed rows of N bits, one atom index per record and the reduced
    basis, rank x atoms residues."""
    n = 100_000
    data = pd.DataFrame({"v": np.zeros(n)})
    audit = ReleaseAudit(data, 10, primes=(P,))
    rng = np.random.default_rng(4)
    audit.record([Functional.of(rng.random(n) < 0.5) for _ in range(20)])
    assert audit.n_released == 20 and audit.rank() == 21
    assert audit.basis_entries() == 21 * audit.n_atoms
    assert audit.state_bytes() == 21 * (n // 8) + 8 * n + 8 * 21 * audit.n_atoms
