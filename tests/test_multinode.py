"""`mtonnx batch` on a 2-node Ray cluster with token authentication, in a network namespace of its own: every row
exactly once and identical to a local run through a killed worker, a lost node and an interrupted driver; a node
without the model and a driver without the token each get one line; no Ray process outlives a test.

Each test runs `mtonnx.scale.cluster.run_job` inside `isolated` (unshare --net: root or user namespaces).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mtonnx import data
from mtonnx.scale import cluster, measure, shards
from mtonnx.scale.jobs import translate_files

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare"),
]
OPTIONS = {"num_beams": 2, "max_new_tokens": 8}  # the tiny model never stops by itself
BATCH = 4
BATCH_ARGS = ("--beams", "2", "--max-new-tokens", "8", "--batch-size", "4")  # the same, as `mtonnx batch` takes them
LINES, FILES = 1200, 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    pytest.importorskip("ray.data")
    root = tmp_path_factory.mktemp("multinode") / "in"
    measure.write_corpus([p.en for p in data.hsk_split("train")[:200]], LINES, root, FILES)
    return root


@pytest.fixture(scope="module")
def local(hand_export, corpus, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("multinode") / "local"
    translate_files(hand_export, str(corpus / "*"), out, batch_size=BATCH, options=OPTIONS, progress=False)
    return shards.read_output(out).to_pylist()


def two_nodes(fault: str, model: Path, corpus: Path, out: Path) -> dict:
    """run_job's result for `fault` on a 2-node cluster, run in a new network namespace."""
    result = out.with_suffix(".json")
    args = [fault, str(model), str(corpus / "*"), str(out), str(result), "--", *BATCH_ARGS]
    done = subprocess.run(cluster.isolated(args), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text(encoding="utf-8"))


@pytest.mark.parametrize("fault", ["kill-worker", "kill-node", "interrupt"])
def test_every_row_lands_exactly_once_and_as_local_through(fault, hand_export, corpus, local, tmp_path):
    result = two_nodes(fault, hand_export, corpus, tmp_path / "out")
    runs = result["runs"]
    if fault == "interrupt":
        assert runs[0]["rc"] != 0 and runs[1]["rc"] == 0, result
        assert 0 < result["interrupted_after_shards"] < FILES, result  # stopped mid-job: the rerun had work left
    else:
        assert [run["rc"] for run in runs] == [0] and result["killed"] > 0, result
    rows = shards.read_output(tmp_path / "out").to_pylist()
    assert len(rows) == len({row["id"] for row in rows}) == LINES
    assert rows == local  # every column: ids, sources, positions, texts, translations, errors
    assert result["left"] == 0, "Ray processes outlived the cluster"


def test_a_node_without_the_model_is_named_in_one_line(hand_export, corpus, tmp_path):
    result = two_nodes("hidden-model", hand_export, corpus, tmp_path / "out")
    (run,) = result["runs"]
    assert run["rc"] == 2 and not any("Traceback" in line for line in run["stderr"]), result
    last = run["stderr"][-1]  # the job's one error line, after its log lines
    assert last.startswith("mtonnx: error: node 127.0.0.1 (id ") and f"no model directory {hand_export}:" in last
    assert not list((tmp_path / "out").glob("*.parquet")) and result["left"] == 0


def test_a_driver_without_the_cluster_s_token_is_told_how_to_pass_it(hand_export, corpus, tmp_path):
    result = two_nodes("no-token", hand_export, corpus, tmp_path / "out")
    (run,) = result["runs"]
    assert run["rc"] == 2 and not any("Traceback" in line for line in run["stderr"]), result
    last = run["stderr"][-1]
    assert last.startswith("mtonnx: error: cannot join the Ray cluster at 127.0.0.1:") and "RAY_AUTH_TOKEN" in last
    assert result["left"] == 0
