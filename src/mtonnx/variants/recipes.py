"""The named variant recipes notebook 06 compares, in one registry: what each is, and how to build it.

Every recipe is built from the same fp32 export; a recipe the tools cannot build is a result (`failed`), not
an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtonnx.variants import transforms
from mtonnx.variants.build import build_variant
from mtonnx.variants.calibration import Feeds, static_int8
from mtonnx.variants.transforms import Transform


@dataclass(frozen=True)
class Inputs:
    """What some recipes need: the model's attention heads and hidden size (ORT's optimizer), calibration feeds."""

    heads: int
    hidden: int
    feeds: Feeds | None = None


@dataclass(frozen=True)
class Recipe:
    """A named recipe: a one-line description and a factory of its transform."""

    name: str
    about: str
    make: Callable[[Inputs], Transform]
    calibrated: bool = False  # needs Inputs.feeds


RECIPES = (
    Recipe("fp32", "the export itself: the baseline", lambda i: transforms.copy_fp32),
    Recipe(
        "fp32-ortopt",
        "onnxruntime.transformers' optimizer (bart fusions)",
        lambda i: transforms.ort_optimized(i.heads, i.hidden),
    ),
    Recipe(
        "int8-naive", "quantize_dynamic(model, out, weight_type=QInt8), nothing else", lambda i: transforms.naive_int8
    ),
    Recipe("int8", "dynamic int8 of the MatMuls, lm_head untied first", lambda i: transforms.dynamic_int8()),
    Recipe(
        "int8-per-channel", "as int8, one scale per output channel", lambda i: transforms.dynamic_int8(per_channel=True)
    ),
    Recipe(
        "int8-with-embeddings",
        "as int8, the embedding Gathers quantized too",
        lambda i: transforms.dynamic_int8(op_types=("MatMul", "Gather")),
    ),
    Recipe("int8-static-minmax", "static QDQ int8, MinMax calibration", lambda i: static_int8(i.feeds, "MinMax"), True),
    Recipe(
        "int8-static-entropy", "static QDQ int8, entropy calibration", lambda i: static_int8(i.feeds, "Entropy"), True
    ),
    Recipe(
        "int8-static-enc+dynamic-dec",
        "static QDQ encoder, dynamic int8 decoders",
        lambda i: transforms.per_file(static_int8(i.feeds, "MinMax"), transforms.dynamic_int8()),
        True,
    ),
    Recipe("fp16", "float16 weights, fp32 inputs and outputs", lambda i: transforms.fp16),
    *(
        Recipe(
            f"int{bits}-blockwise-b{block}",
            f"MatMulNBits, {bits}-bit weights in blocks of {block}, accuracy_level 4"
            + (", embedding GatherBlockQuantized" if bits == 4 else ""),
            lambda i, b=bits, k=block: transforms.blockwise(b, k),
        )
        for bits in (8, 4)
        for block in (32, 128)
    ),
)
BY_NAME = {r.name: r for r in RECIPES}


def build_all(
    fp32_dir: str | Path, variants_dir: str | Path, inputs: Inputs, names: tuple[str, ...] | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Build the recipes (all, or `names`) into variants_dir/<name>; returns (manifests, failures by name)."""
    built, failed = {}, {}
    for recipe in RECIPES if names is None else [BY_NAME[n] for n in names]:
        if recipe.calibrated and inputs.feeds is None:
            failed[recipe.name] = "no calibration feeds given"
            continue
        try:
            built[recipe.name] = build_variant(
                recipe.name, fp32_dir, Path(variants_dir) / recipe.name, recipe.make(inputs), {"name": recipe.name}
            )
        except Exception as err:  # a recipe the tools cannot do is a result, shown by the notebook
            failed[recipe.name] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return built, failed
