"""`run.fingerprint`: one hash over everything a run produced that is not a timing, so that two runs of the same
commit and params on the same machine can be told identical (or not) at a glance.

What goes in (`run.fingerprint_inputs`, so a reviewer sees why two fingerprints differ): the hash of every ONNX
file and weights file the run wrote, the hash of PyTorch's baseline token ids, and every metric that report.schema
declares reproducible (token-match rates, BLEU/chrF and their paired statistics, gate outcomes, each variant's
token-id hash, sizes, the recommendation, doctor and parity results) or does not declare at all. Timings,
resident memory, speed ratios, the verdicts read off them and the netron renders (which depend on a browser's
timing) stay out, and so does the run's own section.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from mtonnx.report import schema
from mtonnx.report.baseline import BASELINE_FILE
from mtonnx.report.record import flatten
from mtonnx.runtime import layout

SECTION = "run"


def fingerprint(run_dir: str | Path, metrics: dict[str, Any]) -> dict[str, Any]:
    """{"fingerprint": sha256 prefix, "fingerprint_inputs": {name: value or file hash}} for a run directory."""
    run_dir = Path(run_dir)
    inputs: dict[str, Any] = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and _is_model_file(p)):
        inputs[f"file {path.relative_to(run_dir).as_posix()}"] = _sha(path.read_bytes())
    baseline = run_dir / BASELINE_FILE
    if baseline.is_file():
        items = json.loads(baseline.read_text(encoding="utf-8"))["items"]
        ids = [[item[k] for k in sorted(item) if k.endswith("_ids")] for item in items]
        inputs["baseline token ids"] = _sha(json.dumps(ids).encode())
    for key, value in flatten({k: v for k, v in metrics.items() if k != SECTION}).items():
        if schema.reproducible(key):
            inputs[f"metric {key}"] = value
    digest = _sha(json.dumps(inputs, sort_keys=True, default=str).encode())
    return {"fingerprint": digest, "fingerprint_inputs": inputs}


def _is_model_file(path: Path) -> bool:
    return path.suffix == ".onnx" or path.name == layout.WEIGHTS


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]
