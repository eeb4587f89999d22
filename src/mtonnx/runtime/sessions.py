"""ONNX Runtime sessions: one settings object for every session of a model, and the tuned runtime's settings.

One InferenceSession per file, created once and shared by all calls (ORT's run() is thread-safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

OPTIMIZATION = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# ORT graph transformers every session skips unless told otherwise. SkipLayerNormFusion: ORT's fused CPU kernel is
# slower than the Add + LayerNormalization it replaces at the batch sizes beam search runs. fp32 keeps every token
# without it; int8 amplifies the last-bit differences of the other summation order, so the int8 variants go through
# the lab's gates with this setting (the tuning ablation measures the step).
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
ORT_DEFAULTS = {"disabled_optimizers": ()}  # every ORT fusion on: the ablation's steps before this one
MAX_THREADS = 256


@dataclass(frozen=True)
class SessionSettings:
    """Thread count, graph optimization level and spin-waiting for every session of a model.

    Spinning is off by default: ORT's spin-waiting worker threads oversubscribe a machine with few cores
    (the lab measures both). `disabled_optimizers` names ORT graph transformers to skip: by default
    DISABLED_OPTIMIZERS, () for all of ORT's fusions. ORT's CPU arena is off by default: it keeps a generation's
    peak for the life of the session, while without it the tensors come from the heap that runtime.heap holds
    during a generation and returns after it, so RSS after a generation stays near RSS after load, at a small
    cost in time that the lab's memory steps measure.
    """

    threads: int = 1
    optimization: str = "all"
    spinning: bool = False
    disabled_optimizers: tuple[str, ...] = DISABLED_OPTIMIZERS
    arena: bool = False

    def __post_init__(self):
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 0 <= self.threads <= MAX_THREADS:
            raise ValueError(
                f"threads must be an integer from 0 (ONNX Runtime's default) to {MAX_THREADS}, got {self.threads!r}"
            )

    def options(self) -> ort.SessionOptions:
        """The ort.SessionOptions these settings describe (threads 0: ONNX Runtime picks)."""
        if self.optimization not in OPTIMIZATION:
            raise ValueError(f"optimization must be one of {', '.join(OPTIMIZATION)}, got {self.optimization!r}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = OPTIMIZATION[self.optimization]
        options.enable_cpu_mem_arena = self.arena
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "1" if self.spinning else "0")
        return options


def make_session(path: str | Path, settings: SessionSettings = SessionSettings()) -> ort.InferenceSession:
    """A CPU InferenceSession for one file."""
    return ort.InferenceSession(
        str(path),
        settings.options(),
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(settings.disabled_optimizers),
    )
