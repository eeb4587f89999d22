"""The variant pipeline, stage by stage: variants → gates → objective → recommendation → web export → `deploy/`.

Notebook 06 calls the stages one at a time and shows what each produced; `migrate` calls `run`, the one place that
composes them. Everything either path decides is decided here, once: which recipes and probes are built, when
`int8-mixed` is built (from the probes' gates), which variants are timed, with which ONNX Runtime session settings,
and beside which peers. So the lab and `migrate` give the same rows and the same recommendation for the same model
and params.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtonnx import artefacts
from mtonnx.foundation.files import relative
from mtonnx.measure import verdicts
from mtonnx.measure.variants import VariantBench, compare, workload
from mtonnx.runtime import layout
from mtonnx.settings import Settings
from mtonnx.variants import registry

MIXED = "int8-mixed"  # built after the probes, from the groups whose probe passed every gate
WEB = "web"  # run_dir/web: the web export, copied into deploy/web unless its gate failed


class GatesFailed(RuntimeError):
    """No variant besides fp32 passes every gate; str() names the nearest, its number and the threshold."""


@dataclass(frozen=True)
class Where:
    """Where a pipeline reads and writes: the model, its fp32 export, the run directory (variants/, deploy/ and the
    peers' conversions under it) and the project root the model card names the run from."""

    model_dir: Path
    export_dir: Path
    run_dir: Path
    root: Path

    @property
    def variants_dir(self) -> Path:
        """The built variants, one directory each."""
        return self.run_dir / "variants"


@dataclass
class Variants:
    """The variants stage's result: what the recipes were given, and what was built, reused or failed."""

    inputs: registry.Inputs
    built: registry.Built


@dataclass
class Gated:
    """The gates stage's result: every deployable variant's translations and gates, and the probes' groups."""

    translated: dict[str, dict[str, Any]]
    quality: dict[str, Any]  # measure.variants.compare: rows (every gate per variant), sentences, signatures
    groups: dict[str, Any] = field(default_factory=dict)  # variants.sensitivity.table of the probes
    safe: tuple[str, ...] = ()  # the groups int8-mixed quantizes
    failed: dict[str, str] = field(default_factory=dict)  # recipes that could not be built, and why


@dataclass
class Timed:
    """The objective stage's result: the candidates and peers timed, one row per variant (measure.variants.table)."""

    candidates: list[str]
    speed: dict[str, dict[str, Any]]
    rows: dict[str, dict[str, Any]]
    session: dict[str, Any]  # the ONNX Runtime session settings the variants were translated and timed with


@dataclass
class Result:
    """The whole pipeline's result."""

    variants: Variants
    gated: Gated
    timed: Timed
    recommended: str
    reason: str
    objective: str
    facts: dict[str, Any]


def bench(settings: Settings, sources: list[str], references: list[str]) -> VariantBench:
    """The sentences and settings every variant is translated, gated and timed with (the params' session settings
    for the variants, their thread count for the peers)."""
    q = settings.quant
    return VariantBench(
        sources,
        references,
        max_new_tokens=settings.generation.max_new_tokens,
        session=settings.session,
        source_prefix=settings.source_prefix,
        timing_sentences=q.timing_sentences,
        repeats=q.speed_repeats,
        warmup=settings.warmup,
        workload=workload(dataclasses.asdict(q), {"num_beams": settings.generation.num_beams}),
        invariance_sentences=q.invariance_sentences,
        invariance_batch=q.invariance_batch,
    )


def names(settings: Settings, only_fp32: bool = False) -> list[str]:
    """The recipes the variants stage builds: `quant.recipes`' deployable ones and the group probes (int8-mixed
    comes after them, in `gate`), or fp32 alone; ValueError naming an unknown recipe."""
    if only_fp32:
        return [registry.FP32.name]
    return [*registry.selected(settings.quant.recipes), *registry.PROBES]


def build(where: Where, settings: Settings, only_fp32: bool = False, log: artefacts.Log = print) -> Variants:
    """The variants stage: the recipes of `names`, with the calibration feeds and the shortlist they need."""
    wanted = names(settings, only_fp32)
    inputs = registry.Inputs() if only_fp32 else artefacts.inputs(where.export_dir, settings)
    return Variants(inputs, artefacts.build(where.export_dir, where.variants_dir, wanted, inputs, log=log))


def gate(
    measured: VariantBench, where: Where, variants: Variants, settings: Settings, log: artefacts.Log = print
) -> Gated:
    """The gates stage: every built variant translates the evaluation set; the probes' gates choose the groups of
    int8-mixed, which is then built and translated too; each deployable variant's batch invariance is measured;
    every gate is decided (measure.variants.compare) and the translations written beside the variants."""
    from mtonnx.measure.variants import write_translations
    from mtonnx.variants import sensitivity

    q = settings.quant
    translated = measured.translate_all({n: where.variants_dir / n for n in variants.built.manifests})
    probes = {n: translated.pop(n) for n in registry.PROBES if n in translated}
    out = Gated(translated, {}, failed=dict(variants.built.failed))
    if probes:
        probed = compare({"fp32": translated["fp32"], **probes}, measured.references, q.gate_bleu, q.fidelity_min)
        out.groups = sensitivity.table(probed["rows"])
        out.safe = tuple(sensitivity.safe_groups(sensitivity.passing(probed["rows"])))
        inputs = dataclasses.replace(variants.inputs, groups=out.safe)
        mixed = artefacts.build(where.export_dir, where.variants_dir, [MIXED], inputs, log=log)
        out.failed.update(mixed.failed)
        translated.update(measured.translate_all({n: where.variants_dir / n for n in mixed.manifests}))
    deployable = {n: where.variants_dir / n for n in translated if registry.BY_NAME[n].deployable}
    invariance = measured.invariance_all(deployable)
    out.quality = compare(
        translated,
        measured.references,
        q.gate_bleu,
        q.fidelity_min,
        invariance=invariance,
        exempt=dict(q.invariance_exempt),
    )
    write_translations(where.variants_dir, measured.sources, measured.references, translated)
    return out


def failure(rows: dict[str, dict[str, Any]], settings: Settings) -> str | None:
    """None when a variant besides fp32 passes every gate (or none besides fp32 was built); else the gate failure
    of the variant nearest to passing, with its number and the threshold."""
    others = {n: r for n, r in rows.items() if n != registry.FP32.name}
    if not others or any(verdicts.passes(r) for r in others.values()):
        return None
    name, row = max(
        others.items(),
        key=lambda kv: (
            kv[1]["gate"] == "pass",
            kv[1]["fidelity_gate"] == "pass",
            kv[1]["fidelity"]["same_as_fp32"],
            (kv[1]["batch_invariance"] or {}).get("share", 0),
        ),
    )
    head = f"gates: no variant besides fp32 passes every gate; the nearest, {name}, is"
    if row["gate"] == row["fidelity_gate"] == "pass":
        measured = row["batch_invariance"] or {}
        return (
            f"{head} {row['invariance_gate']} on the batch invariance gate: {measured.get('share', 0):.1%} of "
            f"{measured.get('sentences', 0)} sentences with the same tokens alone, batched and shuffled, against "
            "100 % (quant.invariance_exempt opts a variant out, with a reason)"
        )
    if row["gate"] != "pass":
        low, high = row["bleu_delta_ci"]
        return (
            f"{head} {row['gate']} on the quality gate: BLEU delta {row['bleu_delta']:+.2f}, 95 % CI [{low:+.2f}, "
            f"{high:+.2f}], against -quant.gate_bleu {-settings.quant.gate_bleu:g}"
        )
    same, (low, high) = row["fidelity"]["same_as_fp32"], row["fidelity"]["same_as_fp32_ci"]
    return (
        f"{head} {row['fidelity_gate']} on the fidelity gate: {same:.1%} of sentences identical to fp32, 95 % CI "
        f"[{low:.1%}, {high:.1%}], against quant.fidelity_min {settings.quant.fidelity_min:.0%}"
    )


def objective(measured: VariantBench, where: Where, gated: Gated, settings: Settings) -> Timed:
    """The objective stage: the candidates (every deployable variant past every gate, fp32 first) timed on the
    objective, interleaved with PyTorch fp32 and CTranslate2 int8 at the params' thread count; each variant's
    footprint and finite outputs; one row per variant."""
    from mtonnx.check.parity import finite_outputs
    from mtonnx.measure import peers
    from mtonnx.measure.variants import candidates, table

    rows = gated.quality["rows"]
    chosen = candidates(rows)
    contenders = {name: measured.runtime(where.variants_dir / name) for name in chosen}
    contenders.update(
        peers.contenders(
            where.model_dir,
            where.run_dir,
            where.export_dir,
            settings.generation.max_new_tokens,
            settings.source_prefix,
            settings.session.threads,
        )
    )
    speed = measured.speed(contenders)
    footprints = {n: measured.footprint(where.variants_dir / n, rss=n in chosen) for n in rows}
    finite = {n: finite_outputs(where.variants_dir / n, measured.sources[:4]) for n in rows}
    return Timed(chosen, speed, table(rows, speed, footprints, finite), dataclasses.asdict(settings.session))


def recommend(timed: Timed, settings: Settings, objective_name: str) -> tuple[str, str]:
    """The recommendation stage: (variant, why) by measure.verdicts.recommend's policy at `quant.speed_margin`."""
    return verdicts.recommend(timed.rows, margin=settings.quant.speed_margin, objective=objective_name)


def web(
    where: Where,
    settings: Settings,
    sources: list[str],
    *,
    model: str,
    family: str,
    recommended: str = "fp32",
    page: Callable[..., Any] | None = None,
    log: artefacts.Log = print,
) -> dict[str, Any]:
    """The web export stage: optimum's export of the model (reused when current) and, when the recommended variant
    is not fp32, its int8 form (mtonnx.web.quantized: the deployed variants' hand layouts, the in-place cache and a
    cut lm_head, have no form in the layout Transformers.js loads, their quantization does) as run_dir/web, with its
    page, gated (mtonnx.web.gated: Node against the Python runtime, int8's fidelity to fp32, the page in `page`, a
    browser session, against Node), keeping the precision the gates chose. A web export whose gate failed is
    removed and not published; one whose gate could not be measured (no Node here) is published, marked so.
    Returns the run's `web` section."""
    from mtonnx.web.gated import WEB_INT8, gated_export

    if family != "marian":
        return {"published": False, "reason": f"the web export covers Marian models; this one is {family}"}
    optimum_dir = where.run_dir / "export_optimum"
    artefacts.optimum_export(where.model_dir, optimum_dir, log)
    return gated_export(
        optimum_dir,
        where.run_dir / WEB,
        sources,
        model=model,
        beams=settings.generation.num_beams,
        max_new_tokens=settings.generation.max_new_tokens,
        fidelity_min=settings.quant.fidelity_min,
        source_prefix=settings.source_prefix,
        int8_dir=where.run_dir / WEB_INT8 if recommended != "fp32" else None,
        page=page,
    )


def publish(
    where: Where,
    settings: Settings,
    gated: Gated,
    timed: Timed,
    recommended: str,
    reason: str,
    objective_name: str,
    *,
    model: str,
    family: str,
    data: str,
    web: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The publishing stage: `deploy/` with the recommended variant's files, the web export when `web` (the web
    stage's section) says it is published, and the model card; the card's facts."""
    from mtonnx import deploy
    from mtonnx.runtime import Translator

    facts = deploy.facts(
        model=model,
        family=family,
        variant=recommended,
        rows=timed.rows,
        speed=timed.speed,
        quality=gated.quality,
        quant=dataclasses.asdict(settings.quant),
        objective=objective_name,
        reason=reason,
        data=data,
        layout_name=Translator(where.variants_dir / recommended).layout,
        run=relative(where.run_dir.resolve(), where.root.resolve()),
        source_prefix=settings.source_prefix,
        web=web,
    )
    published = web is not None and web.get("published")
    deploy.publish(where.run_dir, where.variants_dir / recommended, facts, where.run_dir / WEB if published else None)
    return facts


def quant_section(result: Result) -> dict[str, Any]:
    """What the run records under `quant` (metrics.json): a row per variant, the peers' times, the candidates and
    the session settings they were timed with, the probes' groups, the failures, the recommendation and the
    evaluation's signatures."""
    quality = result.gated.quality
    return {
        **result.timed.rows,
        "peers": {name: timed for name, timed in result.timed.speed.items() if name not in result.timed.rows},
        "candidates": result.timed.candidates,
        "session": result.timed.session,
        "groups": result.gated.groups,
        "failed": result.gated.failed,
        "recommended": result.recommended,
        "recommended_reason": result.reason,
        "objective": result.objective,
        "bleu_signature": quality["signature"]["bleu"],
        "chrf_signature": quality["signature"]["chrf"],
        "sentences": quality["sentences"],
    }


def web_section(result: Result) -> dict[str, Any]:
    """What the run records under `web`: the web stage's section (the export, its page and its gate in Node)."""
    return result.facts.get("web") or {}


def deploy_section(result: Result) -> dict[str, Any]:
    """What the run records under `deploy`: the variant, the directory and the layout the runtime loads."""
    return {"variant": result.recommended, "dir": layout.DEPLOY, "layout": result.facts["layout"]}


def run(
    where: Where,
    settings: Settings,
    sources: list[str],
    references: list[str],
    *,
    model: str,
    family: str,
    data: str,
    only_fp32: bool = False,
    page: Callable[..., Any] | None = None,
    log: Callable[[str], None] = print,
) -> Result:
    """Every stage in order: variants → gates → objective → recommendation → web export (its page gated in `page`,
    a browser session, when given) → deploy/. GatesFailed (after the gates, with everything built kept) when no
    variant besides fp32 passes them all."""
    measured = bench(settings, sources, references)
    variants = build(where, settings, only_fp32, log)
    gated = gate(measured, where, variants, settings, log)
    problem = failure(gated.quality["rows"], settings)
    if problem:
        raise GatesFailed(problem)
    timed = objective(measured, where, gated, settings)
    recommended, reason = recommend(timed, settings, measured.objective)
    exported = web(where, settings, sources, model=model, family=family, recommended=recommended, page=page, log=log)
    facts = publish(
        where,
        settings,
        gated,
        timed,
        recommended,
        reason,
        measured.objective,
        model=model,
        family=family,
        data=data,
        web=exported,
    )
    return Result(variants, gated, timed, recommended, reason, measured.objective, facts)
