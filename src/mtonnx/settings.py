"""The params a pipeline stage reads, as typed settings: one frozen dataclass per concern, read once from the
validated params (mtonnx.params), so that a stage names `settings.quant.gate_bleu` and a misspelt key fails where it
is written rather than as a KeyError in the middle of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mtonnx.runtime import SessionSettings


@dataclass(frozen=True)
class Export:
    """`export`: the exporter, its opset, and the parity tolerance against PyTorch."""

    exporter: str = "dynamo"
    opset: int = 18
    tolerance: float = 1e-4


@dataclass(frozen=True)
class Generation:
    """`generation`: what a translation is asked for."""

    max_new_tokens: int = 64
    num_beams: int = 4
    batch_size: int = 8


@dataclass(frozen=True)
class Quant:
    """`quant`: which variants to build, their gates, the objective and the recommendation's margin."""

    recipes: str | tuple[str, ...] = "all"
    gate_bleu: float = 0.5
    fidelity_min: float = 0.8
    invariance_sentences: int = 200
    invariance_batch: int = 16
    invariance_exempt: dict[str, str] = field(default_factory=dict)
    workload_batches: tuple[int, ...] = (1, 8)
    workload_beams: int | None = None
    workload_weights: tuple[float, ...] | None = None
    workload_corpus: int = 0
    timing_sentences: int = 16
    speed_repeats: int = 5
    speed_margin: float = 1.1
    calibration_tokens: int = 16


@dataclass(frozen=True)
class Settings:
    """Everything a pipeline stage reads from the params."""

    source_prefix: str = ""
    session: SessionSettings = SessionSettings()
    warmup: int = 1
    shortlist_frequent: int = 1000
    shortlist_per_source: int = 50
    data: dict[str, Any] = field(default_factory=dict)  # data.calibration_set and data.describe read the section
    export: Export = Export()
    generation: Generation = Generation()
    quant: Quant = Quant()

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Settings:
        """From validated params (mtonnx.params.load or defaults)."""
        r, q, b = params["runtime"], params["quant"], params["bench"]
        weights = q["workload_weights"]
        return cls(
            source_prefix=params["model"]["source_prefix"],
            session=SessionSettings(threads=r["threads"], optimization=r["optimization"], spinning=r["spinning"]),
            warmup=b["warmup"],
            shortlist_frequent=b["shortlist_frequent"],
            shortlist_per_source=b["shortlist_per_source"],
            data=dict(params["data"]),
            export=Export(**{k: params["export"][k] for k in ("exporter", "opset", "tolerance")}),
            generation=Generation(
                **{k: params["generation"][k] for k in ("max_new_tokens", "num_beams", "batch_size")}
            ),
            quant=Quant(
                recipes=q["recipes"] if isinstance(q["recipes"], str) else tuple(q["recipes"]),
                gate_bleu=q["gate_bleu"],
                fidelity_min=q["fidelity_min"],
                invariance_sentences=q["invariance_sentences"],
                invariance_batch=q["invariance_batch"],
                invariance_exempt=dict(q["invariance_exempt"]),
                workload_batches=tuple(q["workload_batches"]),
                workload_beams=q["workload_beams"],
                workload_weights=None if weights is None else tuple(weights),
                workload_corpus=q["workload_corpus"],
                timing_sentences=q["timing_sentences"],
                speed_repeats=q["speed_repeats"],
                speed_margin=q["speed_margin"],
                calibration_tokens=q["calibration_tokens"],
            ),
        )
