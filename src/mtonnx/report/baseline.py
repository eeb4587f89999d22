"""baseline.json: PyTorch's translations of the eval set (text and token ids, greedy and beam), written by
notebook 01; every later notebook compares its outputs with them."""

from __future__ import annotations

import json
from pathlib import Path

from mtonnx.data import Pair
from mtonnx.foundation.files import write_json

BASELINE_FILE = "baseline.json"


def save_baseline(run_dir, pairs: list[Pair], runs: dict[str, dict], scores: dict[str, dict], params: dict) -> dict:
    """Write baseline.json: PyTorch's token ids and text per sentence, for later notebooks to compare with."""
    baseline = {
        "params_hash": params["_hash"],
        "model": params["model"],
        "generation": params["generation"],
        "scores": scores,
        "items": [
            {
                "id": p.id,
                "source": p.source,
                "en": p.en,
                "zh": p.zh,
                **{f"{name}": run["hypotheses"][i] for name, run in runs.items()},
                **{f"{name}_ids": run["token_ids"][i] for name, run in runs.items()},
            }
            for i, p in enumerate(pairs)
        ],
    }
    write_json(Path(run_dir) / BASELINE_FILE, baseline)
    return baseline


def load_baseline(run_dir) -> dict:
    """The baseline notebook 01 wrote for this run; a clear error when it has not run yet."""
    path = Path(run_dir) / BASELINE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run notebook 01 first (python -m mtonnx run --only 01,...)")
    return json.loads(path.read_text(encoding="utf-8"))


def showcase_rows(items: list[dict], count: int = 6) -> list[int]:
    """Which of these baseline items an example table shows: where PyTorch's beam translation is closest to the
    reference next to where it is farthest (scores.showcase)."""
    from mtonnx.scores import showcase

    return showcase([i["beam"] for i in items], [i["zh"] for i in items], count)


def example_table(items: list[dict], columns: dict[str, list[str]], rows: list[int] | None = None):
    """A lesson's example table: English, the reference and PyTorch's beam translation with its sentence chrF, then
    each of `columns` (outputs aligned with `items`, or with `rows` when given), on the showcase rows."""
    import pandas as pd

    from mtonnx.scores import sentence_chrf

    shown = showcase_rows(items) if rows is None else rows
    picked = [items[r] for r in shown]
    return pd.DataFrame(
        {
            "English": [i["en"] for i in picked],
            "reference": [i["zh"] for i in picked],
            "PyTorch beam": [i["beam"] for i in picked],
            "chrF vs reference": sentence_chrf([i["beam"] for i in picked], [i["zh"] for i in picked]),
            **{name: list(out) if rows is not None else [out[r] for r in shown] for name, out in columns.items()},
        }
    )
