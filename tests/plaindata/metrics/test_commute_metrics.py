"""Commute-data utility metrics against hand-computed values."""

import math

import numpy as np
import pytest

from petlab.plaindata.metrics.commute import (
    average_commute_by_destination,
    commute_cdf,
    earthmover_approximation,
    root_average_imse,
    to_unit_cube,
)


def test_average_commute_is_worker_weighted():
    latitude = np.array([0.0, 0.0, 0.0])
    longitude = np.array([0.0, 1.0, 2.0])  # one degree of longitude at the equator ~ 69.09 miles
    average = average_commute_by_destination([0, 0, 1], [1, 2, 1], [3, 1, 2], latitude, longitude)
    degree = 2 * 3958.8 * math.pi / 360
    assert average[0] == pytest.approx((3 * degree + 2 * degree) / 4)
    assert average[1] == pytest.approx(0.0)


def test_commute_cdf():
    cdf = commute_cdf([1.0, 5.0, 10.0], [1, 2, 1], [0.5, 1.0, 5.0, 9.9, 10.0])
    assert cdf.tolist() == [0.0, 0.25, 0.75, 0.75, 1.0]


def test_root_average_imse_by_hand():
    part = np.array([0, 0, 1, 2])  # blocks 0, 1 form part 0
    truth = (np.array([0, 0, 2]), np.array([1, 2, 3]), np.array([3, 1, 4]))  # dest parts 0 (4 workers), 1 (4)
    synthetic = (np.array([0, 2]), np.array([3, 2]), np.array([4, 4]))
    table = root_average_imse(truth, synthetic, part, size_classes=(1,))
    # part 0: truth shares {0: .75, 1: .25}, synthetic {2: 1}: .5625 + .0625 + 1 = 1.625
    # part 1: truth {2: 1}, synthetic {1: 1}: 2
    assert table.root_average_imse[0] == pytest.approx(math.sqrt((1.625 * 4 + 2 * 4) / 8))
    assert root_average_imse(truth, truth, part).root_average_imse[0] == 0.0


def test_earthmover_approximation_by_hand():
    a = np.array([[0.1, 0.1], [0.6, 0.6]])
    assert earthmover_approximation(a, a, 4).tolist() == [0.0] * 5
    b = np.array([[0.1, 0.1], [0.6, 0.9]])  # second point leaves its level-2 cell
    out = earthmover_approximation(a, b, 3)
    d = math.sqrt(2)
    assert out == pytest.approx([0.0, 0.0, 2 * d / 4, 2 * d / 4 + 2 * d / 8])
    assert to_unit_cube(np.array([[5.0, 0.0]]), np.array([0.0, 0.0]), np.array([10.0, 0.0])).tolist() == [
        [0.5, 0.0]
    ]


def test_earthmover_depth_is_bounded_by_the_cell_keys():
    points = np.zeros((1, 4))
    assert len(earthmover_approximation(points, points, 15)) == 16
    with pytest.raises(ValueError, match="depth"):
        earthmover_approximation(points, points, 16)
