"""Static int8 (QDQ) with calibration: the inputs each file sees while the fp32 runtime translates the
calibration sentences, fed to onnxruntime's `quantize_static` through a CalibrationDataReader.

The call tutorials show, `quantize_static(..., calibration_data=[], quant_format=QuantType.QInt8)`, cannot run:
it passes a list where a CalibrationDataReader is required and a weight type where a format is required.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from mtonnx.passes.graph import weight_nodes
from mtonnx.passes.lm_head import untie_lm_head
from mtonnx.variants.transforms import Transform, staged_model

Feeds = dict[str, list[dict[str, np.ndarray]]]


class FeedsReader:
    """An ORT CalibrationDataReader over recorded input dicts."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next recorded input dict, None when all were read."""
        return next(self._feeds, None)


class _Recording:
    """A session stand-in that keeps every feed dict it runs (`Translator(wrap=...)`)."""

    def __init__(self, session, into: list[dict[str, np.ndarray]]):
        self.session, self.into = session, into

    def run(self, outputs, feeds):
        self.into.append(dict(feeds))
        return self.session.run(outputs, feeds)

    def __getattr__(self, name):
        return getattr(self.session, name)


def capture_feeds(fp32_dir: str | Path, sentences: list[str], max_new_tokens: int = 16, batch_size: int = 8) -> Feeds:
    """Inputs each file of the split layout sees while the fp32 runtime translates `sentences` greedily."""
    from mtonnx.runtime import Translator

    recorded: Feeds = {}
    translator = Translator(
        fp32_dir, decoder="split", wrap=lambda file, session: _Recording(session, recorded.setdefault(file, []))
    )
    translator.translate_pieces(sentences, batch_size=batch_size, num_beams=1, max_new_tokens=max_new_tokens)
    return recorded


def static_int8(feeds: Feeds, method: str = "MinMax", per_channel: bool = False) -> Transform:
    """QDQ static quantization of the weight MatMuls, calibrated with recorded feeds (MinMax/Entropy/Percentile)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    def transform(src: Path, dst: Path) -> dict[str, Any]:
        model = onnx.load(str(src))
        untied = untie_lm_head(model)
        nodes = [n.name for n in weight_nodes(model)]

        def quantize(staged: Path, out: Path) -> dict[str, Any]:
            quantize_static(
                str(staged),
                str(out),
                FeedsReader(feeds[src.name]),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=["MatMul"],
                nodes_to_quantize=nodes,
                per_channel=per_channel,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=getattr(CalibrationMethod, method),
                extra_options={"ActivationSymmetric": True},
            )
            return {}

        staged_model(model, src.name, quantize, dst)
        return {"untied": untied, "quantized_nodes": len(nodes), "calibration_batches": len(feeds[src.name])}

    return transform
