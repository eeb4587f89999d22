"""`Context`: what every notebook starts from, in one call (`lab.context(params_path, run_dir, models_dir)`).

The validated params, the resolved model directory, the ONNX Runtime session settings the params ask for, and
the run's directories; the model's config is read from config.json, the PyTorch model loaded only when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from mtonnx import params as params_module
from mtonnx.foundation.files import relative
from mtonnx.runtime import SessionSettings, families, layout
from mtonnx.settings import Settings
from mtonnx.sources import models


@dataclass
class Context:
    """One notebook's view of its run."""

    params: dict[str, Any]
    run_dir: Path
    models_dir: Path
    model: dict[str, Any]  # sources.models.resolve's answer: dir, name, source, cached, seconds

    @classmethod
    def open(cls, params_path: str | Path, run_dir: str | Path, models_dir: str | Path) -> Context:
        """Validate the params file and resolve its model (built into `models_dir` if it is a built one), its
        directory named from the working directory as the run's are: a notebook shows no machine's absolute path."""
        params = params_module.load(params_path)
        model = models.resolve(params["model"], models_dir, params["_root"])
        return cls(params, Path(run_dir), Path(models_dir), {**model, "dir": relative(model["dir"])})

    @property
    def model_dir(self) -> Path:
        """The resolved model directory."""
        return Path(self.model["dir"])

    @property
    def prefix(self) -> str:
        """The text put in front of every source sentence (`model.source_prefix`)."""
        return self.params["model"]["source_prefix"]

    @cached_property
    def settings(self) -> Settings:
        """The params as the pipeline's typed settings (mtonnx.settings)."""
        return Settings.from_params(self.params)

    @property
    def session(self) -> SessionSettings:
        """The runtime section as ONNX Runtime session settings."""
        return self.settings.session

    @property
    def where(self):
        """Where the variant pipeline reads and writes for this run (pipeline.stages.Where; imported here, so that
        opening a notebook does not load the pipeline's measuring libraries)."""
        from mtonnx.pipeline.stages import Where

        root = Path(self.params["_root"])
        return Where(self.model_dir, self.export_dir, self.run_dir, root)

    @property
    def export_dir(self) -> Path:
        """The hand export (notebook 02)."""
        return self.run_dir / "export_manual"

    @property
    def optimum_dir(self) -> Path:
        """optimum's export (notebook 03)."""
        return self.run_dir / "export_optimum"

    @property
    def variants_dir(self) -> Path:
        """The quantized and converted variants (notebooks 06 and 07)."""
        return self.run_dir / "variants"

    @property
    def deploy_dir(self) -> Path:
        """The recommended variant with its model card (notebook 06): what notebooks 11 and 12 serve."""
        return self.run_dir / layout.DEPLOY

    @cached_property
    def config(self):
        """The model's config (its family's class), read from config.json (no weights loaded)."""
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.model_dir)

    @cached_property
    def family(self) -> families.Family:
        """The model's family (runtime.families): what differs from Marian, M2M100/NLLB to T5."""
        return families.of_dir(self.model_dir)

    def load_model(self):
        """(model in eval mode, tokenizer) of the model's family: the PyTorch reference."""
        return models.load_pretrained(self.model_dir)

    def baseline(self) -> dict[str, Any]:
        """baseline.json, PyTorch's translations of the eval set written by notebook 01."""
        from mtonnx.report.baseline import load_baseline

        return load_baseline(self.run_dir)
