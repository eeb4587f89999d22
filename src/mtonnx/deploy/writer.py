"""`outputs/<run>/deploy/`: the one directory a deployer takes, the recommended variant with all the runtime needs,
and its `model_card.md`, written from the run's own measurements.

`publish` (the pipeline's last stage, pipeline.stages.publish) links the recommended variant's files into deploy/
(hard links: the bytes are stored once; a mapped weights file is copied, since the onnx library refuses external
data with several links) and writes the card: model, recipe, every gate with its evidence, the objective's speed
against fp32 and CTranslate2, why it was chosen. `stamp` (lab.finish, once the run is complete) adds the run's
fingerprint and git commit, which exist only then. `translate`, `serve` and `batch` take `--run outputs/<run>` and
load deploy/.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import link_or_copy, staged_dir, write_atomic
from mtonnx.runtime import layout
from mtonnx.runtime.integrity import write_sums

STAMP = re.compile(r"^- Run: .*$", re.M)  # the card's line `stamp` fills in
WEB = "web"  # the web export's directory inside deploy/
FACTS = layout.DEPLOY_FACTS  # beside the card: what it was written from (the source prefix the runtime reads)


def facts(
    *,
    model: str,
    family: str,
    variant: str,
    rows: dict[str, dict[str, Any]],
    speed: dict[str, dict[str, Any]],
    quality: dict[str, Any],
    quant: dict[str, Any],
    objective: str,
    reason: str,
    data: str,
    layout_name: str,
    run: str,
    source_prefix: str = "",
    web: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the model card is written from, read off a run's measurements (pipeline.stages.publish calls it, for
    the lab and `mtonnx migrate` alike): the variant's row, every gate's settings, the objective against fp32 and
    the peers."""
    from mtonnx.measure.timing import paired_ratio
    from mtonnx.variants import registry

    row = rows[variant]
    fp32 = speed.get("fp32", {}).get("times_ms_workload")
    return {
        "model": model,
        "family": family,
        "variant": variant,
        "recipe": registry.BY_NAME[variant].about if variant in registry.BY_NAME else variant,
        "row": row,
        "fp32_bleu": rows["fp32"]["bleu"],
        "sentences": quality["sentences"],
        "gate_bleu": quant["gate_bleu"],
        "fidelity_min": quant["fidelity_min"],
        "data": data,
        "objective": objective,
        "repeats": quant["speed_repeats"],
        "vs_fp32": (paired_ratio(fp32, speed[variant]["times_ms_workload"]) or {}).get("median") if fp32 else None,
        "vs_peers": {f"vs {p}": row.get(f"vs_{p}") for p in ("pytorch-fp32", "ct2-int8")},
        "reason": reason,
        "layout": layout_name,
        "run": run,
        "source_prefix": source_prefix,
        "web": web,
    }


def publish(
    run_dir: str | Path, variant_dir: str | Path, facts: dict[str, Any], web_dir: str | Path | None = None
) -> Path:
    """Replace run_dir/deploy with the files of `variant_dir`, the web export `web_dir` as deploy/web (when given)
    and a model card written from `facts` (`card`'s keys); returns the deploy directory."""
    target = Path(run_dir) / layout.DEPLOY
    with staged_dir(target) as tmp:
        for path in sorted(Path(variant_dir).iterdir()):
            if path.name == layout.WEIGHTS:  # onnx refuses external data with several hard links: copied
                shutil.copy2(path, tmp / path.name)
            elif path.is_file():
                link_or_copy(path, tmp / path.name)
        if web_dir is not None:
            shutil.copytree(web_dir, tmp / WEB, copy_function=link_or_copy)
        (tmp / FACTS).write_text(json.dumps(facts, ensure_ascii=False, indent=2, default=str) + "\n", "utf-8")
        (tmp / layout.MODEL_CARD).write_text(card(facts), encoding="utf-8")
        write_sums(tmp)
    return target


def stamp(run_dir: str | Path, fingerprint: str, env: dict[str, Any]) -> None:
    """Fill in the card's run line: the fingerprint, the git commit, the params hash, the machine (no-op without a
    deploy directory)."""
    path = Path(run_dir) / layout.DEPLOY / layout.MODEL_CARD
    if not path.is_file():
        return
    git, cpu = env.get("git", {}), env.get("cpu", {})
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    line = (
        f"- Run: fingerprint `{fingerprint}`, git `{git.get('sha') or 'unknown'}`{dirty}, params hash "
        f"`{env.get('params_hash')}`, {cpu.get('model', '?')} ({cpu.get('usable_cores', '?')} cores), "
        f"onnxruntime {env.get('packages', {}).get('onnxruntime')}"
    )
    write_atomic(path, STAMP.sub(line, path.read_text(encoding="utf-8"), count=1))
    write_sums(path.parent)


def invariance_line(row: dict[str, Any]) -> str:
    """The model card's batch invariance line: the gate, and what was measured (or why not)."""
    verdict, measured = row.get("invariance_gate", "not measured"), row.get("batch_invariance")
    if not measured:
        return f"- Batch invariance: **{verdict}**."
    beams = ", ".join(
        f"{'greedy' if k == 'beam1' else k[4:] + ' beams'} {v:.1%}" for k, v in measured.items() if k.startswith("beam")
    )
    return (
        f"- Batch invariance (the same tokens alone, in batches of {measured['batch']} and shuffled, "
        f"{measured['sentences']} sentences): **{verdict}**; {beams} of the sentences unchanged."
    )


def card(facts: dict[str, Any]) -> str:
    """The model card: every number in it comes from `facts`, the run's own measurements."""
    row, fidelity = facts["row"], facts["row"]["fidelity"]
    peers = ", ".join(
        f"{ratio}x {peer}"
        for peer, ratio in (("fp32", facts.get("vs_fp32")), *facts.get("vs_peers", {}).items())
        if ratio is not None
    )
    lines = [
        f"# {facts['model']}: {facts['variant']}",
        "",
        f"The variant `mtonnx run` recommended for {facts['model']} ({facts['family']}), built by the recipe "
        f"`{facts['variant']}`: {facts['recipe']}.",
        "",
        "## Gates",
        "",
        f"- Quality (against the references, {facts['sentences']} sentences, sacrebleu's paired bootstrap): "
        f"**{row['gate']}**; BLEU {row['bleu']} (fp32 {facts['fp32_bleu']}), delta {row['bleu_delta']:+.2f}, "
        f"95 % CI [{row['bleu_delta_ci'][0]:+.2f}, {row['bleu_delta_ci'][1]:+.2f}], margin {facts['gate_bleu']}.",
        f"- Fidelity (against fp32's own translations of the same sentences): **{row['fidelity_gate']}**; "
        f"{fidelity['same_as_fp32']:.1%} identical, 95 % CI [{fidelity['same_as_fp32_ci'][0]:.1%}, "
        f"{fidelity['same_as_fp32_ci'][1]:.1%}], minimum {facts['fidelity_min']:.0%}; chrF against fp32's output "
        f"{fidelity['chrf_vs_fp32']}.",
        invariance_line(row),
        f"- Evaluation data: {facts['data']}.",
        "",
        "## Speed",
        "",
        f"- Objective `{facts['objective']}`: {row['workload_ms']} ms for the workload, "
        f"{facts['repeats']} paired repetitions" + (f"; {peers} (paired medians)" if peers else "") + ".",
        f"- Size: {row['size_mb']} MB; resident memory after load {row.get('rss_mb', '?')} MB.",
        "",
        "## Why this variant",
        "",
        facts["reason"],
        "",
        *web_lines(facts.get("web"), facts["run"]),
        "## Provenance",
        "",
        "- Run: written when the run completes",
        f"- Layout the runtime loads: `{facts['layout']}`",
        "",
        "## Use",
        "",
        "```bash",
        f"mtonnx translate --run {facts['run']} -i in.txt -o out.txt",
        f"mtonnx serve --run {facts['run']}",
        f"mtonnx doctor --model-dir {facts['run']}/{layout.DEPLOY}",
        "```",
        "",
    ]
    return "\n".join(lines)


def web_lines(web: dict[str, Any] | None, run: str) -> list[str]:
    """The card's section on the web export (none when the run made none): what it ships, its gates in Node, its
    int8 form's fidelity to fp32 and the page's check in a browser."""
    if not web:
        return []
    if not web.get("published"):
        return ["## In the browser and Node", "", f"No web export: {web['reason']}.", ""]
    lines = [
        f"- `{layout.DEPLOY}/{WEB}/` holds the model for Transformers.js (dtype `{web['dtype']}`) and mtonnx's "
        f"JavaScript runtime (`js/`): {web['variant']} ({web['size_mb']} MB), not the deployed variant, whose "
        "in-place cache and cut lm_head have no form in the layout Transformers.js loads; its lm_head is the whole "
        "vocabulary, in fp32."
        + (f" Its page: `mtonnx serve --run {run} --web`, then /web/." if web["page"] == "index.html" else ""),
        f"- fp32 in Node against the Python runtime: {_gate_counts(web['node'])}",
    ]
    q8 = web.get("q8")
    if q8:
        lines.append(f"- int8 in Node against the Python runtime: {_gate_counts(q8['node'])}")
        if "fidelity" in q8:
            f = q8["fidelity"]
            lines.append(
                f"- int8's fidelity to fp32 in Node: **{q8['fidelity_gate']}**; {f['same_as_fp32']:.1%} identical, "
                f"95 % CI [{f['same_as_fp32_ci'][0]:.1%}, {f['same_as_fp32_ci'][1]:.1%}], chrF against fp32 "
                f"{f['chrf_vs_fp32']}."
            )
    page = web.get("browser") or {}
    if page.get("gate") == "not measured":
        lines.append(f"- The page in a browser: not measured ({page['reason']}).")
    elif page:
        f, (low, high) = page["fidelity"], page["fidelity"]["same_as_fp32_ci"]
        lines.append(
            f"- The page in Chromium ({page['dtype']}, WASM): fidelity to fp32 **{page['gate']}**, "
            f"{f['same_as_fp32']:.1%} identical, 95 % CI [{low:.1%}, {high:.1%}]; "
            f"{page['same_as_node']} of {page['sentences']} sentences with Node's ids."
        )
    return ["## In the browser and Node", "", *lines, ""]


def _gate_counts(gate: dict[str, Any]) -> str:
    """One gate of web_lines: its counts of identical sentences and its verdict, or why it was not measured."""
    if gate["gate"] == "not measured":
        return f"not measured ({gate['reason']})."
    counts = ", ".join(f"{k} {v}" for k, v in gate.items() if k not in ("gate", "sentences"))
    return f"sentences identical of {gate['sentences']}: {counts}: **{gate['gate']}**."
