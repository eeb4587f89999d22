"""What a pipeline builds: the fp32 exports and the registry's variants, each reused when its build key matches
(foundation.buildkey). This is the only code that calls an exporter or `variants.registry.build`: the lab's stages,
`migrate` and the benchmarks ask it for what they measure, so a variant is built the same way whoever times it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtonnx.settings import Export, Settings
from mtonnx.variants import registry

Log = Callable[[str], None] | None


def export(model_dir: str | Path, out_dir: str | Path, settings: Export = Export(), log: Log = print) -> dict[str, Any]:
    """The hand export of `model_dir` into `out_dir` with the exporter and opset of `settings`; its manifest."""
    from mtonnx.export.manual import ensure_exported

    return ensure_exported(model_dir, out_dir, exporter=settings.exporter, opset=settings.opset, log=log)


def optimum_export(model_dir: str | Path, out_dir: str | Path, log: Log = print) -> dict[str, Any]:
    """optimum's export of `model_dir` into `out_dir` (export.optimum.ensure_optimum's answer)."""
    from mtonnx.export.optimum import ensure_optimum

    return ensure_optimum(model_dir, out_dir, log=log)


def shortlist(export_dir: str | Path, settings: Settings) -> dict[str, Any]:
    """The lexical shortlist (variants.shortlist) learned from the training pairs with the params' sizes, on the
    export's tokenizer: what the shortlist recipes and CTranslate2's vocabulary map are given."""
    from mtonnx.runtime import load_tokenizer
    from mtonnx.sources import train
    from mtonnx.variants.shortlist import learn_shortlist

    return learn_shortlist(
        train.training_pairs(train.RECIPE),
        load_tokenizer(export_dir),
        settings.shortlist_frequent,
        settings.shortlist_per_source,
        settings.source_prefix,
    )


def inputs(export_dir: str | Path, settings: Settings) -> registry.Inputs:
    """What the registry's recipes need besides the export: the decoder's heads and width (config.json), decoder
    feeds captured on the calibration split (never the evaluation sentences) and the shortlist learned from the
    training pairs, with the params' sizes."""
    from mtonnx import data
    from mtonnx.runtime import families
    from mtonnx.variants.calibration import capture_feeds

    export_dir = Path(export_dir)
    config = json.loads((export_dir / "config.json").read_text(encoding="utf-8"))
    calibration = data.calibration_set(settings.data)
    tokens = settings.quant.calibration_tokens
    return registry.Inputs(
        config[families.of_dir(export_dir).decoder_heads],
        config["d_model"],
        capture_feeds(export_dir, calibration, max_new_tokens=tokens),
        {"sentences": calibration, "tokens": tokens},
        shortlist(export_dir, settings),
    )


def build(
    export_dir: str | Path,
    variants_dir: str | Path,
    names: list[str] | tuple[str, ...],
    inputs: registry.Inputs | None = None,
    log: Log = None,
    extra: tuple[registry.Recipe, ...] = (),
    required: bool = False,
) -> registry.Built:
    """The recipes `names` of the registry (and `extra` ones made for one study) built from `export_dir` into
    `variants_dir`/<name>; `required`: RuntimeError naming every recipe that could not be built."""
    built = registry.build(export_dir, variants_dir, inputs or registry.Inputs(), names, log=log, extra=extra)
    missing = {n: built.failed.get(n, "not built") for n in names if n not in built.manifests}
    if required and missing:
        raise RuntimeError(f"could not build {', '.join(f'{n} ({why})' for n, why in missing.items())}")
    return built
