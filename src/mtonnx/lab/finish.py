"""The last step of every run, the lab's and `migrate`'s alike: the run's fingerprint (what its numbers were computed
from) recorded into metrics.json, the model card stamped with it, and the report page written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtonnx.deploy import stamp
from mtonnx.report.fingerprint import SECTION, fingerprint
from mtonnx.report.index import write_index
from mtonnx.report.record import merge_metrics, record


def finish(
    run_dir: str | Path,
    env: dict[str, Any],
    notebooks: list[dict[str, Any]] | None = None,
    status: str = "ok",
    extra: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Path]:
    """Record the fingerprint (with `extra` beside it) under `run`, stamp deploy/'s card, write the report page
    listing `notebooks` with the run's `status`; returns (the fingerprint's record, the page)."""
    identity = fingerprint(run_dir, merge_metrics(run_dir))
    record(run_dir, SECTION, {**identity, **(extra or {})})
    merge_metrics(run_dir)
    stamp(run_dir, identity["fingerprint"], env)
    return identity, write_index(run_dir, notebooks or [], env, status)
