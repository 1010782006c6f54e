"""The experiment harness on a tiny configuration: files, CSV columns, and wire bytes that equal the
serialized sizes of the messages."""

import json
import math
from dataclasses import replace

import grpc
import numpy as np
import pandas as pd
import pytest

from petlab.client import main as client_main
from petlab.client.call_stats import CallRecorder
from petlab.client.knn_client import _safe, make_channel
from petlab.client.paillier_client import KEYPAIR_FILE
from petlab.crypto.knn.model import KnnSettings
from petlab.crypto.paillier_knn import encrypt_query, generate_keypair, to_bytes
from petlab.experiments import run_all as run_all_module
from petlab.experiments.grpc_demo import client_command, summarise
from petlab.experiments.knn_experiments import KNN_COLUMNS, SWEEP_COLUMNS
from petlab.experiments.run_all import QUICK, run_all
from petlab.owner_only import private_directory, write_owner_only
from petlab.plaindata.onthemap.privacy import accept_reject_epsilon
from petlab.progress import StageLines
from petlab.protos import knn_pb2, knn_pb2_grpc, paillier_pb2, paillier_pb2_grpc
from petlab.server.knn.datasets import load_bundled

TINY = replace(
    QUICK,
    datasets=("iris",),
    n=4,
    k=1,
    queries=1,
    sweep_n=(3,),
    sweep_d=(),  # the d sweep is the n sweep's code path; one real-key point is enough here
    sweep_k=(),
    sweep_base_n=3,
    workers=2000,
    epsilons=(4.6, 8),
    p_mins=(0.1,),
    adaptive_epsilons=(1,),
    adaptive_depth=3,
    omegas=(11,),
    distinguishing_per_class=300,
    links=None,  # petlab-experiments links has its own tests (tests/experiments/test_links.py)
)


@pytest.mark.slow
def test_tiny_run_writes_every_table_figure_and_the_report(tmp_path, monkeypatch, capsys):
    bars = []

    class CountedBar(StageLines):
        def close(self):
            bars.append((self.n, self.total))

    monkeypatch.setattr(run_all_module, "bar", CountedBar)
    out = tmp_path / "results"
    report = run_all(TINY, out, tmp_path / "cache", "tiny")
    assert bars and all(done == total for done, total in bars)  # the bar ends at its total, not past it
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith(f"The report, which opens with these and the plots: {report}")
    for what in ("encrypted k-NN, median latency per query", "OnTheMap synthetic commutes, eps 4.6"):
        assert f"  {what}: " in printed
    for name in (
        "knn",
        "knn_accuracy",
        "knn_sweeps",
        "onthemap",
        "onthemap_commute",
        "adaptive",
        "plausible",
    ):
        assert (out / f"{name}.csv").stat().st_size > 0
    for figure in ("knn_latency", "knn_sweeps", "onthemap_imse", "onthemap_commute", "adaptive_earthmover"):
        assert (out / f"{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    knn = pd.read_csv(out / "knn.csv")
    assert list(knn.columns) == KNN_COLUMNS
    assert set(knn.protocol) == {"clear", "HE k-NN thermo", "Paillier (interactive)"}  # QUICK's families
    for protocol in ("HE k-NN thermo",):
        he = knn[knn.protocol == protocol].iloc[0]
        assert he.agrees_with_clear == 1.0 and he.rounds == 1 and he.key_bytes > 1_000_000
        assert he.bytes_up > 0 and he.bytes_down > 0 and he.client_keygen_s > 0
    assert knn[knn.protocol == "Paillier (interactive)"].iloc[0].rounds == 2
    accuracy = pd.read_csv(out / "knn_accuracy.csv")
    assert set(accuracy.family) == {"thermo"} and (accuracy.test_rows == 30).all()
    assert list(pd.read_csv(out / "knn_sweeps.csv").columns) == SWEEP_COLUMNS
    onthemap = pd.read_csv(out / "onthemap.csv")
    assert {"sweep", "eps", "delta", "p_min", "eps_prime", "imse_all"} <= set(onthemap.columns)
    plausible = pd.read_csv(out / "plausible.csv")
    assert list(plausible.data) == ["reals", "marginals", "omega=11"]
    assert {"tvd_1way", "tvd_2way", "accuracy_rf", "agreement_ada", "distinguish_tree"} <= set(
        plausible.columns
    )
    text = report.read_text()
    assert "cores" in text and "concrete-python" in text and "1.72 s" in text and "79.8" in text


@pytest.fixture(scope="module")
def server(serve, hosted_model, tmp_path_factory):
    hosted = hosted_model("iris", KnnSettings(n=4, k=1, algorithm="fast"))
    with serve(tmp_path_factory.mktemp("wire"), {"iris": hosted}, enable_paillier_baseline=True) as running:
        yield running, hosted.model


@pytest.fixture(scope="module")
def paillier_keypair():
    """One 2048-bit Paillier key pair for the module's tests (about a second to make)."""
    return generate_keypair()


@pytest.mark.slow
def test_the_demo_runs_the_paillier_baseline_with_the_classify_flags(server, paillier_keypair, tmp_path):
    """The demo's ``paillier-classify`` command line, run (in process) against a server with the
    baseline enabled; it ended in a usage error (``--cache-dir``) before the flags were shared.
    The device's cached key pair is the module's, so nothing is generated here."""
    running, _ = server
    address = f"127.0.0.1:{running.port}"
    _, private_key = paillier_keypair
    directory = private_directory(private_directory(tmp_path / "cache") / _safe(address))
    primes = {"p": private_key.p, "q": private_key.q}
    write_owner_only(directory / KEYPAIR_FILE, json.dumps(primes).encode())
    _, test = load_bundled("iris").split()
    rows = tmp_path / "rows.csv"
    pd.DataFrame(test.features[:1], columns=test.feature_names).to_csv(rows, index=False)
    cache = tmp_path / "cache"
    argv = client_command("paillier-classify", running.port, rows, tmp_path / "stats.json", cache)
    assert client_main.main([*argv[1:], "--quiet"]) == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    summary = summarise(stats, [test.class_names[test.labels[0]]])
    assert summary["protocol"] == "Paillier interactive" and summary["rounds"] == 2
    assert summary["up_bytes"] > 4 * 256 and summary["down_bytes"] > 0
    assert [call["method"] for call in stats["calls"]] == ["ListModels", "Distances", "Labels"]


@pytest.mark.slow
def test_counted_bytes_equal_serialized_message_sizes(server, paillier_keypair):
    running, model = server
    wire = CallRecorder()
    channel = grpc.intercept_channel(make_channel(f"127.0.0.1:{running.port}"), wire)
    knn = knn_pb2_grpc.KnnServiceStub(channel)
    request = knn_pb2.GetClientSpecsRequest(model="iris")
    reply = knn.GetClientSpecs(request)
    assert wire.totals() == (len(request.SerializeToString()), len(reply.SerializeToString()))
    assert [c.method for c in wire.calls] == ["GetClientSpecs"]
    public_key, _ = paillier_keypair
    encrypted, norm = encrypt_query(public_key, model.quantizer.transform(np.array([5.0, 3.4, 1.5, 0.2])))
    distances = paillier_pb2.DistancesRequest(
        model="iris",
        public_key_n=to_bytes(public_key.n),
        encrypted_levels=[to_bytes(c) for c in encrypted],
        encrypted_square_norm=to_bytes(norm),
    )
    before = wire.totals()
    answer = paillier_pb2_grpc.PaillierKnnServiceStub(channel).Distances(distances)
    assert wire.totals()[0] - before[0] == len(distances.SerializeToString()) > 4 * 256
    assert wire.totals()[1] - before[1] == len(answer.SerializeToString()) > 0
    with pytest.raises(grpc.RpcError):  # a failed call is not recorded
        knn.GetClientSpecs(knn_pb2.GetClientSpecsRequest(model="no-such-model"))
    assert len(wire.calls) == 2
    channel.close()


def test_synthesis_utility_experiments_write_their_tables(tmp_path):
    """``onthemap-figures`` and ``adaptive-counts`` on tiny inputs: files written, figures sane,
    each labelled an evaluation."""
    from petlab.experiments.cli import main as experiments_main
    from petlab.experiments.report import EVALUATION_NOTICE

    figures = tmp_path / "figures"
    assert (
        experiments_main(["onthemap-figures", "--workers", "3000", "--sample", "20", "--out", str(figures)])
        == 0
    )
    summary = pd.read_csv(figures / "onthemap_figures.csv")
    assert list(summary.configuration) == ["200mi", "100mi", "100mi-lean", "200mi-dropped", "100mi-dropped"]
    assert (summary.mean_added_all > 0).all()
    # every eps' is the release's own (Theorem 5.2 with the configuration's min f and a
    # whole number of ceil(alpha) ln 2), with its neighbours; the dropped variants are not private
    dropped = summary.configuration.str.endswith("-dropped")
    assert (summary.eps_prime[dropped] == "not private").all()
    assert (summary.statement[dropped] == "not private").all()
    for _, row in summary[~dropped].iterrows():
        base = accept_reject_epsilon(4.6, 1e-5) + math.log(1 / row.min_keep)
        ceil_alpha = (float(row.eps_prime) - base) / math.log(2)
        assert round(ceil_alpha) >= 1 and abs(ceil_alpha - round(ceil_alpha)) < 1e-3
        assert f"epsilon' = {float(row.eps_prime):.4f}".rstrip("0") in row.statement
        assert "one worker's origin moved within its destination" in row.statement
    assert all((figures / f"figure_{n}.png").stat().st_size > 0 for n in (1, 2, 3, 4))
    counts = tmp_path / "counts.md"
    assert (
        experiments_main(["adaptive-counts", "--workers", "2000", "--eps", "0.5", "--out", str(counts)]) == 0
    )
    # figures of the (simulated) confidential data, compared with the truth: each report says so
    for report in (figures / "onthemap_figures.md", counts):
        assert EVALUATION_NOTICE in report.read_text(), report
    table = pd.read_csv(counts.with_suffix(".csv"))
    # the totals come from the cost objects: Theorem 3 (2 eps) + the leaf counts (eps); direct: eps
    direct = table.method.str.startswith("direct")
    assert (table.total_eps[~direct] == 3 * 0.5).all() and (table.total_eps[direct] == 0.5).all()
    centered = table[table.method.str.startswith("leaf counts centered")].iloc[0]
    clamped = table[table.method.str.contains("paper")].iloc[0]
    assert abs(centered.synthetic - centered.real) < abs(clamped.synthetic - clamped.real)


def test_knn_bench_compile_only_makes_no_keys_and_reports_the_cost_model(tmp_path, monkeypatch):
    """``knn-bench --compile-only`` compiles and reports PBS and concrete's complexity without keys
    or queries (it once generated keys and timed queries anyway: the flag did not reach a row)."""
    from petlab.experiments import knn_bench

    def no_keys(*args, **kwargs):
        raise AssertionError("--compile-only generated keys")

    monkeypatch.setattr(knn_bench, "KnnClient", no_keys)
    out = tmp_path / "bench.csv"
    assert knn_bench.run_bench([10], 1, out, ["thermo"], datasets=("iris",), compile_only=True) == 0
    row = pd.read_csv(out).iloc[0]
    assert row.pbs_count == row.cost_model_pbs > 0
    assert float(row.complexity) > 0
    assert pd.isna(row.server_median_s) and pd.isna(row.keygen_s)
    table = out.with_suffix(".md").read_text()
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    assert any(row[:3] == ["thermo", "iris", "10"] for row in cells)  # the row, however padded
    assert "server_median_s" not in table and "complexity" in table  # no empty latency columns
