import numpy as np
import pytest

from petlab.crypto.knn.quantization import MinMaxQuantizer


def test_training_range_maps_to_full_levels():
    features = np.array([[0.0, 10.0], [1.0, 20.0], [0.5, 15.0]])
    quantizer = MinMaxQuantizer.fit(features, bits=4)
    levels = quantizer.transform(features)
    assert levels.dtype == np.int64
    assert levels.tolist() == [[0, 0], [15, 15], [8, 8]]  # 7.5 rounds half to even: 8


def test_out_of_range_queries_are_clipped_to_the_box():
    quantizer = MinMaxQuantizer.fit(np.array([[0.0], [1.0]]), bits=3)
    assert quantizer.transform(np.array([-5.0])).tolist() == [0]
    assert quantizer.transform(np.array([9.0])).tolist() == [7]
    assert quantizer.transform(np.array([[0.5], [2.0]])).tolist() == [[4], [7]]


def test_constant_feature_maps_to_zero():
    quantizer = MinMaxQuantizer.fit(np.array([[3.0, 1.0], [3.0, 2.0]]), bits=4)
    assert quantizer.transform(np.array([[3.0, 1.0], [7.0, 2.0]]))[:, 0].tolist() == [0, 0]


def test_roundtrip_through_dict():
    quantizer = MinMaxQuantizer.fit(np.random.default_rng(1).normal(size=(20, 3)), bits=5)
    again = MinMaxQuantizer.from_dict(quantizer.to_dict())
    assert again == quantizer


@pytest.mark.parametrize(
    "features, bits, message",
    [
        (np.zeros((3,)), 4, "2-D"),
        (np.zeros((0, 2)), 4, "empty"),
        (np.array([[np.nan, 1.0]]), 4, "NaN"),
        (np.zeros((2, 2)), 0, "bits"),
        (np.zeros((2, 2)), 9, "bits"),
    ],
)
def test_fit_rejects_bad_input(features, bits, message):
    with pytest.raises(ValueError, match=message):
        MinMaxQuantizer.fit(features, bits)


def test_transform_rejects_wrong_width_and_nan():
    quantizer = MinMaxQuantizer.fit(np.zeros((2, 3)), bits=4)
    with pytest.raises(ValueError, match="expected 3 features"):
        quantizer.transform(np.zeros(4))
    with pytest.raises(ValueError, match="NaN"):
        quantizer.transform(np.array([0.0, np.inf, 0.0]))


def test_from_dict_rejects_inconsistent_bounds():
    with pytest.raises(ValueError):
        MinMaxQuantizer.from_dict({"bits": 4, "lows": [1.0], "highs": [0.0]})
    with pytest.raises(ValueError):
        MinMaxQuantizer.from_dict({"bits": 4, "lows": [1.0]})


def test_both_clients_read_the_quantizer_from_model_info_and_validate_it():
    from petlab.client.knn_client import quantizer_of
    from petlab.protos import knn_pb2

    fitted = MinMaxQuantizer.fit(np.array([[0.0, 1.0], [2.0, 5.0]]), bits=4)
    info = knn_pb2.ModelInfo(bits=4, feature_lows=fitted.lows, feature_highs=fitted.highs)
    assert quantizer_of(info) == fitted
    for bad in (
        knn_pb2.ModelInfo(bits=0, feature_lows=[0.0], feature_highs=[1.0]),
        knn_pb2.ModelInfo(bits=4, feature_lows=[0.0, 1.0], feature_highs=[1.0]),
        knn_pb2.ModelInfo(bits=4, feature_lows=[2.0], feature_highs=[1.0]),
        knn_pb2.ModelInfo(bits=4, feature_lows=[float("nan")], feature_highs=[1.0]),
    ):
        with pytest.raises(ValueError):
            quantizer_of(bad)
