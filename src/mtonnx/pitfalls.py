"""Pitfalls from the field, reproduced on the current model: each function shows the failure as data."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx import export, validate


def static_axes(model, work_dir: str | Path, exporter: str = "dynamo", opset: int = export.DEFAULT_OPSET,
                run_length: int = 12) -> dict[str, Any]:
    """Export the encoder without dynamic axes, then feed it a sentence of another length."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    encoder = export.subgraphs(model.config.decoder_layers)[0]
    spec = dataclasses.replace(encoder, dynamic_axes={name: {} for name in encoder.inputs})
    sample = export.Sample(model)
    path = work_dir / "encoder_static.onnx"
    export.export_subgraph(model, spec, sample, path, exporter, opset)
    session = validate.session(path)
    ids = np.full((1, run_length), 5, dtype=np.int64)
    try:
        session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        error = None
    except Exception as err:  # the point of the demonstration: ORT rejects the other length
        error = f"{type(err).__name__}: {' '.join(str(err).split())}"
    return {
        "exported_input_shape": list(sample.input_ids.shape),
        "session_input_shapes": {i.name: i.shape for i in session.get_inputs()},
        "ran_input_shape": list(ids.shape),
        "error": error,
    }
