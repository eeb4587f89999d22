"""Every variant the project builds, in one registry of recipes, built in one place (`build`) and keyed by content.

A recipe is built from the fp32 export (`transform`, applied to each file of the split layout) or from another
recipe's directory (`derive`, with `base` naming it):
- the plain recipes: fp32, ORT's optimizer, dynamic int8 (naive, fixed, per channel, with embeddings, and
  int8-rows: one activation scale per row, so that no sentence's tokens depend on its batch), static int8, fp16,
  MatMulNBits at 8 and 4 bits;
- the tuned forms compose the tuned step onto a quantization recipe ("int8, then the tuned step", `tuned`): key
  transposes folded before quantizing, the cross K/V file, the tuned and in-place steps, the weights in one mapped
  file and the search head (variants.tuned explains each step);
- the restricted forms cut a tuned variant's output rows: to the target side's (target-vocab) or per batch to a
  lexical shortlist;
- the search graph wraps a tuned variant's split files in ORT's BeamSearch op; the Translator cannot run it (its
  search is ORT's, with ORT's beam rules), so it is measured by the benchmark but never deployed;
- the sensitivity probes (one group of weights int8, the rest fp32) are scratch: measured, then removed at the end of
  the run unless params keep them; int8-mixed quantizes the groups whose probes pass the gates.

Every built directory records its build key (foundation.buildkey): the recipe and its settings, the key of what it
was built from (the export's own key, or the base variant's), the inputs it used (calibration, shortlist, groups)
and the versions that change the bytes. A matching key is reused with a log line; anything else is rebuilt. A
recipe the tools cannot build is a result (`failed`, with the reason), not an exception.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mtonnx.foundation import buildkey
from mtonnx.variants import transforms
from mtonnx.variants.build import build_variant
from mtonnx.variants.calibration import Feeds, static_int8
from mtonnx.variants.transforms import GROUPS, Transform

BYTES_VERSIONS = ("onnx", "onnxruntime", "mtonnx")  # the libraries whose versions change a variant's bytes


@dataclass(frozen=True)
class Inputs:
    """What some recipes need: attention heads and hidden size (ORT's optimizer), calibration feeds (static int8),
    the learned shortlist, the MatMul groups of int8-mixed."""

    heads: int | None = None
    hidden: int | None = None
    feeds: Feeds | None = None
    calibration: dict[str, Any] = field(default_factory=dict)  # what the feeds came from: sentences, tokens
    shortlist: dict[str, Any] | None = None
    groups: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Recipe:
    """A named way to build a variant, and what the run does with it."""

    name: str
    about: str
    transform: Callable[[Inputs], Transform] | None = None  # per file, from the fp32 export
    finalize: Callable[[Path], dict[str, Any]] | None = None  # on the whole staged directory, after `transform`
    derive: Callable[[Inputs, Path, Path], dict[str, Any]] | None = None  # (inputs, base dir, out dir) -> manifest
    base: str | None = None  # the recipe `derive` builds from
    needs: str | None = None  # the Inputs field it cannot be built without
    lossy: str | None = None  # why it can change translations beyond rounding (the gates decide on the evidence)
    deployable: bool = True  # the Translator (translate, serve, batch) can run it
    scratch: bool = False  # a probe: removed at the end of the run unless params keep it
    settings: dict[str, Any] = field(default_factory=dict)  # what its key records besides name and about


def tuned(recipe: Recipe) -> Recipe:
    """`recipe`, then the tuned step: its transform applied after the key transposes are folded, plus the cross K/V
    file, the tuned and in-place steps, the weights in one mapped file and the search head."""
    from mtonnx.variants.tuned import finalize

    def transform(inputs: Inputs) -> Transform:
        inner = recipe.transform(inputs)
        return transforms.with_tuned_step(transforms.with_cross_kv(transforms.folded(inner)))

    def finish(directory: Path) -> dict[str, Any]:
        return {**(recipe.finalize(directory) if recipe.finalize else {}), **finalize(directory)}

    return replace(
        recipe,
        name=f"{recipe.name}-tuned",
        about=f"{recipe.about}; then the tuned step (in-place decoding step, one mapped weights file, search head)",
        transform=transform,
        finalize=finish,
        settings={**recipe.settings, "tuned": True},
    )


def _restricted(inputs: Inputs, source: Path, out: Path) -> dict[str, Any]:
    from mtonnx.variants.restricted import build_restricted

    return build_restricted(source, out)


def _shortlisted(inputs: Inputs, source: Path, out: Path) -> dict[str, Any]:
    from mtonnx.variants.shortlist import build_shortlisted

    return build_shortlisted(source, out, inputs.shortlist)


def _search_graph(inputs: Inputs, source: Path, out: Path) -> dict[str, Any]:
    from mtonnx.passes.search_graph import build_search_model

    return build_search_model(source, out)


def group_probe(group: str) -> Recipe:
    """Only `group`'s weights int8 (embeddings: the Gathers), the rest fp32: the group's cost and gain on its own."""
    op_types = ("Gather",) if group == "embeddings" else ("MatMul",)
    return Recipe(
        f"group-{group}",
        f"sensitivity probe: only the {group} weights dynamic int8",
        lambda i: transforms.dynamic_int8(op_types=op_types, groups=(group,)),
        scratch=True,
        settings={"groups": [group]},
    )


FP32 = Recipe("fp32", "the export itself: the baseline", lambda i: transforms.copy_fp32)
INT8 = Recipe("int8", "dynamic int8 of the MatMuls, lm_head untied first", lambda i: transforms.dynamic_int8())
INT8_TUNED = tuned(INT8)
INT8_ROWS = Recipe(
    "int8-rows",
    "as int8, the activations quantized one row at a time (symmetric), so no row's scale depends on its batch",
    lambda i: transforms.dynamic_int8(row_scales=True),
    finalize=transforms.fused_row_scales,
)
INT8_ROWS_TUNED = tuned(INT8_ROWS)
RECIPES: tuple[Recipe, ...] = (
    FP32,
    Recipe(
        "fp32-ortopt",
        "onnxruntime.transformers' optimizer (bart fusions)",
        lambda i: transforms.ort_optimized(i.heads, i.hidden),
        needs="heads",
    ),
    Recipe(
        "int8-naive",
        "quantize_dynamic(model, out, weight_type=QInt8), nothing else",
        lambda i: transforms.naive_int8,
        lossy="the embedding is dequantized every step (the tied lm_head)",
    ),
    INT8,
    Recipe(
        "int8-per-channel",
        "as int8, one scale per output channel",
        lambda i: transforms.dynamic_int8(per_channel=True),
    ),
    Recipe(
        "int8-with-embeddings",
        "as int8, the embedding Gathers quantized too",
        lambda i: transforms.dynamic_int8(op_types=("MatMul", "Gather")),
    ),
    Recipe(
        "int8-static-minmax",
        "static QDQ int8, MinMax calibration",
        lambda i: static_int8(i.feeds, "MinMax"),
        needs="feeds",
    ),
    Recipe(
        "int8-static-entropy",
        "static QDQ int8, entropy calibration",
        lambda i: static_int8(i.feeds, "Entropy"),
        needs="feeds",
    ),
    Recipe(
        "int8-static-enc+dynamic-dec",
        "static QDQ encoder, dynamic int8 decoders",
        lambda i: transforms.per_file(static_int8(i.feeds, "MinMax"), transforms.dynamic_int8()),
        needs="feeds",
    ),
    Recipe("fp16", "float16 weights, fp32 inputs and outputs", lambda i: transforms.fp16),
    *(
        Recipe(
            f"int{bits}-blockwise-b{block}",
            f"MatMulNBits, {bits}-bit weights in blocks of {block}, accuracy_level 4"
            + (", embedding GatherBlockQuantized" if bits == 4 else ""),
            lambda i, b=bits, k=block: transforms.blockwise(b, k),
            lossy="4-bit weights" if bits == 4 else None,
            settings={"bits": bits, "block": block},
        )
        for bits in (8, 4)
        for block in (32, 128)
    ),
    INT8_ROWS,
    tuned(FP32),
    INT8_TUNED,
    INT8_ROWS_TUNED,
    *(
        Recipe(
            f"{base.name}-target-vocab",
            f"{base.name} with the lm_head cut to the rows the target side can emit",
            derive=_restricted,
            base=base.name,
            lossy="beam search normalizes over the kept rows only",
        )
        for base in (INT8_TUNED, INT8_ROWS_TUNED)
    ),
    Recipe(
        f"{INT8_TUNED.name}-shortlist",
        "int8-tuned decoding each batch over a lexical shortlist learned from the training pairs",
        derive=_shortlisted,
        base=INT8_TUNED.name,
        needs="shortlist",
        lossy="a piece off the batch's shortlist cannot be chosen",
    ),
    Recipe(
        "fp32-search-graph",
        "fp32-tuned's split files inside ORT's BeamSearch op: the whole search in one session.run",
        derive=_search_graph,
        base="fp32-tuned",
        lossy="ORT's beam rules (no forced eos at max_length)",
        deployable=False,
    ),
    Recipe(
        "int8-search-graph",
        "int8-tuned's split files inside ORT's BeamSearch op: the whole search in one session.run",
        derive=_search_graph,
        base=INT8_TUNED.name,
        lossy="ORT's beam rules (no forced eos at max_length)",
        deployable=False,
    ),
    *(group_probe(group) for group in GROUPS),
    Recipe(
        "int8-mixed",
        "dynamic int8 of the MatMul groups whose probes pass the gates alone",
        lambda i: transforms.dynamic_int8(groups=i.groups),
        needs="groups",
    ),
)
BY_NAME = {r.name: r for r in RECIPES}
PROBES = tuple(r.name for r in RECIPES if r.scratch)
MAIN = tuple(r.name for r in RECIPES if not r.scratch and r.name != "int8-mixed")  # built before the probes decide


def selected(recipes: str | list[str], deployable_only: bool = True) -> list[str]:
    """The main recipes `quant.recipes` names ("all", or a list; fp32, the baseline, always first), the deployable
    ones only unless told otherwise; ValueError naming an unknown recipe."""
    unknown = [] if recipes == "all" else [r for r in recipes if r not in BY_NAME]
    if unknown:
        raise ValueError(f"quant.recipes: unknown recipe {', '.join(unknown)}; known: {', '.join(MAIN)}")
    wanted = MAIN if recipes == "all" else [FP32.name, *recipes]
    return [n for n in dict.fromkeys(wanted) if n in BY_NAME and (BY_NAME[n].deployable or not deployable_only)]


def key_parts(recipe: Recipe, source_key: str, inputs: Inputs) -> dict[str, Any]:
    """What a recipe's build key is made of: its name, about and settings, the source's key, the inputs it needs,
    the versions that change the bytes."""
    needed: dict[str, Any] = {}
    if recipe.needs == "feeds":
        needed["calibration"] = inputs.calibration
    elif recipe.needs == "shortlist":
        needed["shortlist"] = buildkey.key_of(inputs.shortlist or {})
    elif recipe.needs == "groups":
        needed["groups"] = list(inputs.groups or ())
    if recipe.name == "fp32-ortopt":
        needed["heads_hidden"] = [inputs.heads, inputs.hidden]
    return {
        "recipe": recipe.name,
        "about": recipe.about,
        "settings": recipe.settings,
        "source": source_key,
        **needed,
        "versions": buildkey.versions(*BYTES_VERSIONS),
    }


def source_key(directory: str | Path) -> str:
    """The key a build from `directory` depends on: its recorded build key, else a hash of its files."""
    return buildkey.recorded(directory).get("key") or buildkey.files_fingerprint(directory)


def order(names: list[str] | tuple[str, ...], recipes: tuple[Recipe, ...] = RECIPES) -> list[str]:
    """`names` with every recipe after its base (bases added when missing), in the registry's order otherwise."""
    catalog = {r.name: r for r in recipes}
    wanted: set[str] = set()
    for name in names:
        while name is not None and name not in wanted:
            wanted.add(name)
            name = catalog[name].base
    return [r.name for r in recipes if r.name in wanted]


def rows_probe(count: int) -> Recipe:
    """int8-tuned restricted to `count` output rows (the target side's, then the lowest other ids): a scratch
    build for the speed a restriction buys at each size; which rows it keeps changes which tokens are reachable,
    not the time, so it is timed, never translated with."""

    def derive(inputs: Inputs, source: Path, out: Path) -> dict[str, Any]:
        from mtonnx.passes.output_rows import rows_up_to, target_rows
        from mtonnx.variants.restricted import build_restricted

        target = target_rows(source)
        vocab = len(json.loads((source / "vocab.json").read_text(encoding="utf-8")))
        return build_restricted(source, out, rows_up_to(target, vocab, count))

    return Recipe(
        f"{INT8_TUNED.name}-rows-{count}",
        f"int8-tuned with {count} output rows kept, for timing",
        derive=derive,
        base=INT8_TUNED.name,
        lossy="only the kept rows can be chosen",
        deployable=False,
        scratch=True,
        settings={"rows": count},
    )


@dataclass
class Built:
    """What `build` did: the manifests of the variants now in place, the failures with their reasons, and which
    were reused unchanged."""

    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)


def build(
    export_dir: str | Path,
    variants_dir: str | Path,
    inputs: Inputs,
    names: list[str] | tuple[str, ...] = MAIN,
    log: Callable[[str], None] | None = print,
    extra: tuple[Recipe, ...] = (),
) -> Built:
    """Build the recipes `names` (and the bases they need; `extra` recipes made for one study, e.g. `rows_probe`,
    besides the registry's) into variants_dir/<name>, reusing every directory whose build key matches; returns the
    manifests, failures and reuses."""
    from mtonnx.variants.build import read_manifest

    catalog = (*RECIPES, *extra)
    by_name = {r.name: r for r in catalog}
    export_dir, variants_dir, out = Path(export_dir), Path(variants_dir), Built()
    for name in order(names, catalog):
        recipe, target = by_name[name], variants_dir / name
        if recipe.needs and getattr(inputs, recipe.needs) is None:
            out.failed[name] = f"not built: no {recipe.needs} given"
            continue
        if recipe.base and recipe.base not in out.manifests:
            out.failed[name] = f"not built: its base {recipe.base} is not ({out.failed.get(recipe.base, 'not asked')})"
            continue
        source = variants_dir / recipe.base if recipe.base else export_dir
        parts = key_parts(recipe, source_key(source), inputs)
        try:
            make = functools.partial(_make, recipe, inputs, source, target)
            _, reused = buildkey.reuse_or_build(target, parts, make, log)
        except Exception as err:  # a recipe the tools cannot build is a result, shown by the notebook
            out.failed[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
            continue
        out.manifests[name] = read_manifest(target)
        if reused:
            out.reused.append(name)
    return out


def _make(recipe: Recipe, inputs: Inputs, source: Path, target: Path) -> dict[str, Any]:
    if recipe.derive is not None:
        return recipe.derive(inputs, source, target)
    settings = {"name": recipe.name, **recipe.settings}
    return build_variant(recipe.name, source, target, recipe.transform(inputs), settings, finalize=recipe.finalize)


def describe(names: list[str] | tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The registry as rows a notebook shows: name, what it is, what it is built from, lossy, deployable, scratch."""
    return [
        {
            "variant": r.name,
            "recipe": r.about,
            "from": r.base or "the fp32 export",
            "can change translations": r.lossy or "rounding only",
            "deployable": r.deployable,
            "probe": r.scratch,
        }
        for r in RECIPES
        if names is None or r.name in names
    ]
