"""The thermometer family: the code, distances as a clear matrix product, the per-class network
against a sort, the reference against a brute-force statement of the rule, the circuit (simulated)
against the reference on every data set, crafted ties and fillers, malformed codes, the split
programs (partition, merge, finish) against the whole one, and real encryption on a few Iris
queries."""

from __future__ import annotations

import numpy as np
import pytest

from petlab.crypto.knn.families import ALGORITHMS, default_config, encode_query, family
from petlab.crypto.knn.model import KnnSettings, build_model
from petlab.crypto.knn.quantization import MinMaxQuantizer
from petlab.crypto.knn.thermo import cost, reference
from petlab.crypto.knn.thermo.circuit import compile_thermo_circuit, packed_winner_table
from petlab.crypto.knn.thermo.encoding import is_thermometer, levels_of, thermometer
from petlab.crypto.knn.thermo.network import (
    FILLER,
    finish_program,
    merge_program,
    partition_program,
    whole_program,
)
from petlab.crypto.knn.thermo.plan import (
    DistanceChoice,
    DistanceSpec,
    build_thermo_plan,
    counted_positions,
    default_spec,
    spec_for,
)
from petlab.server.knn.datasets import BUNDLED, bundled_public_bounds, load_bundled, owner_settings

CONFIG = default_config("thermo")


def np_exchange(a, b):
    return np.minimum(a, b), np.maximum(a, b)


def concat(parts):
    return np.concatenate(parts, axis=0)


def lists_of(program, values, filler):
    store = program.run(values, np_exchange, concat)
    return [[filler if s is FILLER else int(store[s]) for s in slots] for slots in program.lists], (
        None if program.kth is FILLER else int(store[program.kth])
    )


def plan_for(name: str, n: int, seed: int = 0):
    """A plan on n random training points of a bundled set (no selection: it is slow on digits
    and not what these tests check), and the quantized held-out rows."""
    train, test = load_bundled(name).split()
    quantizer = MinMaxQuantizer.from_dict(
        {
            "bits": 4,
            "lows": list(bundled_public_bounds(name)[0]),
            "highs": list(bundled_public_bounds(name)[1]),
        }
    )
    rows = np.sort(np.random.default_rng(seed).choice(len(train.labels), size=n, replace=False))
    plan = build_thermo_plan(
        quantizer.transform(train.features[rows]), train.labels[rows], len(train.class_names), 3, 4
    )
    return plan, quantizer.transform(test.features)


# ------------------------------------------------------------------ the code


def test_thermometer_code_round_trips_and_rejects_bad_levels():
    levels = np.array([[0, 3, 7], [7, 7, 0]])
    code = thermometer(levels, 3)
    assert code.shape == (2, 21)
    assert code[0, :7].tolist() == [0] * 7 and code[0, 7:14].tolist() == [1, 1, 1, 0, 0, 0, 0]
    assert levels_of(code, 3, 3).tolist() == levels.tolist()
    assert is_thermometer(code, 3, 3).all()
    broken = code.copy()
    broken[0, 8] = 0  # a hole: 1, 0, 1 is not a thermometer code
    assert not is_thermometer(broken, 3, 3)[0]
    for bad in (np.array([0, 8, 1]), np.array([-1, 0, 0]), np.array([0.5, 1, 1])):
        with pytest.raises(ValueError):
            thermometer(bad, 3)
    assert encode_query("thermo", levels[0], 3).tolist() == code[0].tolist()
    assert encode_query("fast", levels[0], 3).tolist() == levels[0].tolist()  # others send levels


@pytest.mark.parametrize("bits", [3, 4, 5])
def test_distances_are_the_table_sum_for_every_level(bits):
    """Step 1's telescoping sum: code @ weights + offsets is sum_f g(q_f, x_f) for every level of
    every feature (each query row sets all features to one level, so all levels are covered)."""
    rng = np.random.default_rng(bits)
    d = 5
    train = rng.integers(0, 1 << bits, size=(30, d))
    plan = build_thermo_plan(train, rng.integers(0, 3, size=30), 3, 3, bits)
    levels = np.repeat(np.arange(1 << bits)[:, None], d, axis=1)
    levels = np.concatenate([levels, rng.integers(0, 1 << bits, size=(50, d))])
    raw = thermometer(levels, bits) @ plan.weights + plan.offsets
    table = plan.spec.table()
    expected = table[levels[:, None, :], train[None, :, :]].sum(axis=-1)
    assert np.array_equal(raw, expected)
    assert raw.max() <= plan.spec.raw_max and raw.min() >= 0


def test_distance_spec_is_public_and_checked():
    """The spec depends on (d, bits) only; widths it promises hold; it refuses a wide lookup."""
    for d, bits in [(4, 4), (13, 4), (30, 4), (64, 3)]:
        spec = default_spec(d, bits)
        assert spec == default_spec(d, bits)
        assert spec.reduce(np.arange(spec.raw_max + 1)).max() <= spec.distance_max < spec.filler
        if spec.reduced:
            assert spec.raw_bits - spec.shift <= 7
    assert DistanceChoice.parse("16,6,6") == DistanceChoice(16, 6, 6)
    for bad in ("16", "16,6,8", "a,b", "0,3"):
        with pytest.raises(ValueError):
            DistanceChoice.parse(bad)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="distance spec"):
        build_thermo_plan(rng.integers(0, 16, (10, 4)), np.arange(10) % 2, 2, 3, 4, default_spec(5, 4))


# ------------------------------------------------------------------ the network


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_class_lists_and_kth_equal_a_sort(k):
    rng = np.random.default_rng(k)
    for n, n_classes in [(k, 1), (7, 2), (12, 3), (40, 3), (41, 4), (60, 10)]:
        if n < k:
            continue
        labels = rng.integers(0, n_classes, size=n)
        program = whole_program(labels, n_classes, k)
        for _ in range(20):
            values = rng.integers(0, 7, size=n)  # many equal values
            lists, kth = lists_of(program, values, filler=99)
            for c in range(n_classes):
                mine = sorted(values[labels == c].tolist())[:k]
                assert lists[c] == mine + [99] * (k - len(mine))
            assert kth == sorted(values.tolist())[k - 1]


def test_network_is_linear_in_n():
    """About 2 comparators per point for k = 3 (Alekseev's lower bound for the 3 smallest of n:
    2 (n - 3); the fast family's groups of k: about 2.7), and the cost model's extrapolation stays
    linear up to 10^5 points."""
    rng = np.random.default_rng(0)
    for n in (40, 160, 640, 1437):
        program = whole_program(rng.integers(0, 3, size=n), 3, 3)
        assert 2 * (n - 3 * 3) <= program.comparators <= 2 * n + 30
    spec = default_spec(64, 4)
    big = cost.extrapolate([178, 182, 177, 183, 181, 182, 181, 179, 174, 180], 100_000, 3, spec)
    assert 2 * 100_000 <= big.comparators <= 2 * 100_000 + 300
    assert big.reduction == 100_000 and big.truncation == 100_000 * spec.shift


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_class_network_selects_on_every_zero_one_input(k):
    """The 0-1 principle: a comparator network that puts the k smallest, ascending, on its output
    slots for every 0/1 input does so for every input (ties included). Checked exhaustively up to
    13 points of one class, and never worse than rounds of pairwise merges."""
    for n in range(1, 14):
        program = partition_program(np.zeros(n, dtype=np.int64), 1, k)
        inputs = ((np.arange(1 << n)[None, :] >> np.arange(n)[:, None]) & 1).astype(np.int64)
        store = program.run(inputs, np_exchange, concat)
        filler = np.full(1 << n, 2)
        got = np.stack([filler if s is FILLER else store[s] for s in program.lists[0]])
        expected = np.sort(inputs, axis=0)[:k]
        expected = np.concatenate([expected, np.tile(filler, (k - expected.shape[0], 1))])
        assert np.array_equal(got, expected), n
    rounds = {1: 15, 2: 29, 3: 35, 4: 48, 5: 77}  # comparators of rounds of merges at n = 16
    assert partition_program(np.zeros(16, dtype=np.int64), 1, k).comparators <= rounds[k]


def test_split_programs_equal_the_whole_program():
    """Partition lists merged in any tree, then finished, give the whole program's lists and D_k
    (the seam of one query over many workers)."""
    rng = np.random.default_rng(1)
    n_classes, k, filler = 4, 3, 15
    merge, finish = merge_program(n_classes, k), finish_program(n_classes, k)
    for parts in (2, 3, 5):
        labels = rng.integers(0, n_classes, size=50)
        values = rng.integers(0, 15, size=50)
        whole_lists, whole_kth = lists_of(whole_program(labels, n_classes, k), values, filler)
        chunks = np.array_split(np.arange(50), parts)
        partials = [
            np.ravel(lists_of(partition_program(labels[c], n_classes, k), values[c], filler)[0])
            for c in chunks
        ]
        while len(partials) > 1:
            merged, _ = lists_of(merge, np.concatenate(partials[:2]), filler)
            partials = [np.ravel(merged), *partials[2:]]
        lists, kth = lists_of(finish, partials[0], filler)
        assert lists == whole_lists and kth == whole_kth


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_counted_positions_keep_the_winner(k):
    """For every vote vector the rule can produce (C classes, votes 0..k summing to at least k),
    the first class with the most votes is the same without the lists' first entries,
    ``max(v - 1, 0)``, exactly when C <= k; ``plan.counted_positions`` leaves them out then only."""
    for n_classes in range(2, 6):
        changed = False
        for votes in np.ndindex(*(k + 1,) * n_classes):
            v = np.array(votes)
            if v.sum() >= k:
                changed |= int(np.argmax(np.maximum(v - 1, 0))) != int(np.argmax(v))
        assert changed == (n_classes > k), (n_classes, k)
        assert (0 in counted_positions(n_classes, k)) == (n_classes > k)


def test_packed_winner_table_picks_the_first_class_with_most_votes():
    for votes in np.ndindex(4, 4, 4):
        v = np.array(votes)
        beats = [int(v[0] >= v[1]), int(v[0] >= v[2]), int(v[1] >= v[2])]
        packed = beats[0] + 2 * beats[1] + 4 * beats[2]
        assert packed_winner_table(3)[packed] == int(np.argmax(v))


# ------------------------------------------------------------------ the reference


@pytest.mark.parametrize("name", list(BUNDLED))
def test_reference_equals_brute_force(name):
    plan, levels = plan_for(name, 100)
    brute = reference.classify_by_sorting(plan.train, plan.labels, plan.k, plan.n_classes, levels, plan.bits)
    assert np.array_equal(reference.classify(plan, levels), brute)


def test_capped_vote_and_ties():
    """All points at D_k vote, at most k per class; equal votes go to the smaller class."""
    train = np.array([[0, 0]] * 5 + [[1, 1]] * 2 + [[9, 9]] * 3)
    labels = np.array([1, 1, 1, 1, 1, 0, 0, 2, 2, 2])
    spec = DistanceSpec(d=2, bits=4, scale=1, cap=7, distance_bits=4)
    plan = build_thermo_plan(train, labels, 3, 3, 4, spec)
    tr = reference.trace(plan, np.array([0, 0]))
    assert tr.kth[0] == 0 and tr.votes[0].tolist() == [0, 3, 0]  # five points at 0, class 1 counts 3
    tr = reference.trace(plan, np.array([1, 0]))  # distance 1 to (0,0) and (1,1): 7 points at D_k
    assert tr.votes[0].tolist() == [2, 3, 0] and tr.classes[0] == 1
    tied = build_thermo_plan(
        np.array([[0, 0], [0, 0], [5, 5], [5, 5]]), np.array([1, 1, 0, 0]), 2, 1, 4, spec
    )
    assert reference.trace(tied, np.array([2, 2])).votes[0].tolist() == [0, 1]
    assert reference.classify(tied, np.array([3, 3]))[0] == 0  # tie at D_k: one vote each, class 0


# ------------------------------------------------------------------ the circuit (simulation)


@pytest.fixture(scope="module")
def iris_thermo(iris_split):
    train, test = iris_split
    model = build_model(
        "iris",
        train.features,
        train.labels,
        KnnSettings(n=40, algorithm="thermo"),
        public_bounds=bundled_public_bounds("iris"),
    )
    circuit = compile_thermo_circuit(model.plan, CONFIG, simulation=True)
    return model, circuit, model.quantizer.transform(test.features)


def test_iris_simulation_equals_reference(iris_thermo, simulate_all):
    model, circuit, levels = iris_thermo
    expected = reference.classify(model.plan, levels)
    assert np.array_equal(simulate_all(circuit, thermometer(levels, 4), expected), expected)


def test_iris_circuit_lookup_count(iris_thermo):
    """No lookup for distances: comparators + C (k - 1) indicators + the vote (97 at n = 40; fast: 205)."""
    model, circuit, _ = iris_thermo
    plan = model.plan
    expected = plan.program.comparators + len(plan.vote_slots) + 3 + 1
    assert len(plan.vote_slots) == 6  # C = 3 <= k: the lists' first entries need no indicator
    assert not plan.spec.reduced and circuit.programmable_bootstrap_count == expected <= 97
    sizes = np.bincount(plan.labels, minlength=plan.n_classes)
    assert cost.count(sizes, plan.k, plan.spec).total == expected  # the cost model, no compilation


@pytest.mark.parametrize("name, n", [("wine", 14), ("breast_cancer", 10), ("digits", 16)])
def test_other_data_sets_in_simulation(name, n, simulate_all):
    """Reduction (truncation + saturating lookup), C = 2 and C = 10 votes (digits at n = 16: some
    classes have fewer than k points, so their lists hold fillers)."""
    plan, levels = plan_for(name, n)
    circuit = compile_thermo_circuit(plan, CONFIG, simulation=True, execution=False)
    sizes = np.bincount(plan.labels, minlength=plan.n_classes)
    assert plan.spec.reduced and circuit.programmable_bootstrap_count == cost.count(sizes, 3, plan.spec).total
    levels = levels[:12]
    expected = reference.classify(plan, levels)
    assert np.array_equal(simulate_all(circuit, thermometer(levels, plan.bits), expected), expected)


def test_crafted_ties_and_fillers_in_simulation(simulate_all):
    """Duplicated points, a class with fewer than k points (fillers), ties at D_k and equal votes."""
    train = np.array([[2, 2], [2, 2], [2, 2], [3, 3], [12, 12], [12, 12], [7, 7], [7, 8], [8, 7]])
    labels = np.array([0, 1, 2, 2, 1, 0, 3, 3, 3])
    spec = DistanceSpec(d=2, bits=4, scale=4, cap=7, distance_bits=4)
    plan = build_thermo_plan(train, labels, 4, 3, 4, spec)
    circuit = compile_thermo_circuit(plan, CONFIG, simulation=True, execution=False)
    levels = np.array([[2, 2], [12, 12], [7, 7], [5, 5], [0, 15], [15, 0], [9, 9], [2, 12]])
    expected = reference.classify(plan, levels)
    assert np.array_equal(expected, reference.classify_by_sorting(train, labels, 3, 4, levels, 4, spec))
    assert np.array_equal(simulate_all(circuit, thermometer(levels, 4), expected), expected)


# ------------------------------------------------------------------ malformed codes


def test_malformed_code_range_is_the_documented_bound():
    """Any 0/1 code gives feature f the cost g(0, v) + sum_{t in S} (g(t, v) - g(t - 1, v)) for the
    set S of its ones: at least 0 and at most g(0, v) + g(L - 1, v) (knn-circuits.md, Malformed encodings),
    checked over every subset S at 3 bits."""
    spec = DistanceSpec(d=1, bits=3, scale=2, cap=4, distance_bits=4)
    table = spec.table()
    plan = build_thermo_plan(np.arange(8)[:, None], np.arange(8) % 2, 2, 1, 3, spec)
    codes = np.array(list(np.ndindex(*(2,) * 7)))
    raw = codes @ plan.weights + plan.offsets
    assert raw.min() == 0
    assert np.array_equal(raw.max(axis=0), table[0] + table[7])
    valid = is_thermometer(codes, 1, 3)
    assert np.array_equal(raw[valid], table[levels_of(codes[valid], 1, 3)[:, 0]])


@pytest.mark.parametrize("name", list(BUNDLED))
def test_no_code_cancels_a_feature_but_malformed_codes_shape_it_more_freely(name):
    """The documented bound (knn-circuits.md, Malformed encodings), by enumeration of every 0/1 code of one
    feature under the owner's table: no code, valid or not, gives a cost that is the same for
    every training level (so no code isolates the other features), not even one of non-binary
    values wrapping modulo a power of two; while malformed 0/1 codes reach 2^(L-1) distinct
    per-feature cost profiles instead of the L of valid ones."""
    settings = owner_settings(name)
    spec = spec_for(1, settings.bits, settings.distance)
    table = spec.table()
    top = spec.levels - 1
    codes = np.array(list(np.ndindex(*(2,) * top)))
    costs = table[0][None, :] + codes @ (table[1:] - table[:-1])
    assert not (costs.max(axis=1) == costs.min(axis=1)).any()
    valid = is_thermometer(codes, 1, settings.bits)
    assert len({tuple(row) for row in costs[valid]}) == top + 1
    assert len({tuple(row) for row in costs}) == 2**top

    # Non-binary codes: concrete's own client encrypts any value of the input's width (0..31 at
    # Iris), and TFHE's plaintext wraps modulo a power of two. A code whose cost were constant
    # over the levels (over the integers, or modulo 2^p) would be constant modulo 2 or 4 too, with
    # every value reduced into [0, m): so no such code exists when none of those m^top does.
    for m in (2, 4):
        small = np.array(list(np.ndindex(*(m,) * top)))
        reduced = (table[0][None, :] + small @ (table[1:] - table[:-1])) % m
        if not (reduced.max(axis=1) == reduced.min(axis=1)).any():
            break
    else:
        raise AssertionError("a code of values in [0, 4) has a constant cost modulo 4")


def test_malformed_codes_compute_the_reference_on_pseudo_distances(iris_thermo, simulate_all):
    """Bound and document (knn-circuits.md): the circuit evaluates any 0/1 code whose pseudo-distances stay
    in the compiled range exactly as ``reference.classify_code`` does: the capped-vote k-NN of the
    pseudo-distances, nothing else."""
    model, circuit, _ = iris_thermo
    plan = model.plan
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2, size=(400, plan.code_length))
    raw = codes @ plan.weights + plan.offsets
    in_range = codes[(raw <= plan.spec.distance_max).all(axis=1) & ~is_thermometer(codes, plan.d, plan.bits)]
    assert len(in_range) >= 10
    expected = reference.classify_code(plan, in_range[:15])
    assert np.array_equal(simulate_all(circuit, in_range[:15], expected), expected)


# ------------------------------------------------------------------ registry and real encryption


def test_family_is_registered_with_its_encoding():
    assert "thermo" in ALGORITHMS
    assert family("thermo").encode(np.array([1, 0]), 2).tolist() == [1, 0, 0, 0, 0, 0]


def test_iris_real_encryption_over_grpc_equals_reference(iris_thermo, serve, tmp_path, iris_split):
    """The user's path: the client encodes its query as the model's family says (thermometer),
    encrypts, the server evaluates; the answers equal the clear reference (n = 40; the circuit
    compiled for simulation runs for real too)."""
    from petlab.client.knn_client import KnnRemote, make_channel
    from petlab.server.knn.service import HostedModel

    model, circuit, _ = iris_thermo
    hosted = HostedModel(model, circuit.server, dataset="iris")
    held_out = iris_split[1].features
    clear = reference.classify(model.plan, model.quantizer.transform(held_out))
    rows = held_out[[int(np.flatnonzero(clear == c)[0]) for c in np.unique(clear)[-2:]]]
    expected = reference.classify(model.plan, model.quantizer.transform(rows)).tolist()
    assert len(set(expected)) == 2  # two queries of different classes
    with (
        serve(tmp_path / "server", {"iris": hosted}) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        remote = KnnRemote(channel, "test", tmp_path / "client", timeout=300, show_progress=False)
        prepared = remote.prepare("iris")
        assert prepared.info.algorithm == "thermo"
        assert [remote.classify(prepared, row) for row in rows] == expected


def test_server_flags_take_the_whole_training_set_and_a_distance():
    from petlab.server.main import parse_args

    flags = ["--n", "all", "--distance", "16,6,6", "--global-p-error", "0.1"]
    options, _ = parse_args(["serve", "--model", "digits", *flags])
    assert options.knn.settings == owner_settings("digits")
    for bad in (["--distance", "16"], ["--distance", "16,6", "--algorithm", "fast"], ["--n", "some"]):
        with pytest.raises(SystemExit):
            parse_args(["serve", "--model", "digits", *bad])
