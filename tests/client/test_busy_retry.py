"""A device asks a busy server again after its hint, for a key registration as for a
classification; a refusal without the hint (a quota, a cap) is final."""

from __future__ import annotations

import time

import grpc

from petlab.client.knn_client import KnnRemote, PreparedModel, make_channel, quantizer_of
from petlab.crypto.knn.model import KnnSettings
from petlab.protos import knn_pb2, knn_pb2_grpc
from petlab.server.common.admission import ServiceLimits


def test_a_busy_registration_is_asked_again_after_the_hint(serve, keyed_model, tmp_path, silent_requests):
    """The only upload slot is held by an upload that never sends a chunk (dropped after 2 s):
    the device's registration is refused busy, asked again after the hint, and registered."""
    hosted, client = keyed_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))
    limits = ServiceLimits(upload_slots=1, first_chunk_seconds=2.0)
    with (
        serve(tmp_path / "server", {"iris": hosted}, limits=limits) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
        grpc.insecure_channel(
            f"127.0.0.1:{running.port}", options=[("grpc.use_local_subchannel_pool", 1)]
        ) as idle_channel,
    ):
        idle = knn_pb2_grpc.KnnServiceStub(idle_channel).RegisterKeys.future(silent_requests(), timeout=30)
        time.sleep(0.5)  # the idle upload holds the slot
        remote = KnnRemote(channel, "device", cache_dir=tmp_path / "cache", timeout=60, show_progress=False)
        info = hosted.info()
        directory = tmp_path / "keys"
        directory.mkdir(mode=0o700)
        prepared = PreparedModel(info, client, quantizer_of(info), directory)
        started = time.monotonic()
        key_id = remote.upload_keys(prepared)
        assert len(key_id) == 32 and running.keys.locate(key_id, running.keys.entries()[0].model)
        assert time.monotonic() - started >= 1.0, "the first attempt was not refused busy"
        silent_requests.release.set()
        try:
            idle.result(timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # the idle upload was dropped


def test_a_refusal_without_a_hint_is_final(serve, keyed_model, tmp_path):
    """Over the store's cap: RESOURCE_EXHAUSTED without a retry hint, answered at once."""
    hosted, client = keyed_model("iris", KnnSettings(n=6, k=3, algorithm="fast"))
    with (
        serve(tmp_path / "server", {"iris": hosted}, key_cap_bytes=1024) as running,
        make_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        remote = KnnRemote(channel, "device", cache_dir=tmp_path / "cache", timeout=60, show_progress=False)
        info = (
            knn_pb2_grpc.KnnServiceStub(channel).ListModels(knn_pb2.ListModelsRequest(), timeout=5).models[0]
        )
        directory = tmp_path / "keys"
        directory.mkdir(mode=0o700)
        started = time.monotonic()
        try:
            remote.upload_keys(PreparedModel(info, client, quantizer_of(info), directory))
            raise AssertionError("an upload over the cap was accepted")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.monotonic() - started < 5
