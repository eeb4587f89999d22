"""The steps of `mtonnx migrate`, each a call into the library the notebooks use:

load (sources.models) → the evaluation set's language against the model's (migrate.languages) → export
(mtonnx.artefacts) → parity at unseen shapes (check.parity.file_parity) → the runtime's tokens against
`generate` (check.parity.runtime_parity) → the lab's variant pipeline, whole (pipeline.stages.run: variants,
gates, objective, recommendation, deploy/ and its card) → metrics.json, env.json and a one-page report.html
(lab.finish, as the lab's runner finishes a run).

Resumable: each finished step writes `steps/<name>.json` with the key of what it was computed from (the model's
files, the params, the evaluation set, the flags); a rerun with the same key says it reuses the step and goes on
from the first one not finished, and the builds themselves are keyed by content (foundation.buildkey), so an
interrupted variant step rebuilds only what it had not finished. A step that fails on the evidence raises
MigrationFailed naming the step, the number and the threshold, and leaves everything built in place.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtonnx.foundation import buildkey
from mtonnx.foundation.files import write_json
from mtonnx.runtime import families, layout

STEPS = ("load", "export", "parity", "tokens", "pipeline", "report")


class MigrationFailed(RuntimeError):
    """A step that failed on the evidence; str() names the step, the number and the threshold."""


class MigrationRefused(ValueError):
    """Input the migration cannot use (an unsupported architecture, an unreadable evaluation file)."""


@dataclass
class Migration:
    """One migration: what it was asked, where it writes, and the steps' results so far."""

    model: str
    out: Path
    params: dict[str, Any]
    eval_file: Path | None = None
    exporter: str = "manual"
    only_fp32: bool = False
    log: Callable[[str], None] = print
    results: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_args(cls, args, log: Callable[[str], None] = print) -> Migration:
        """From `mtonnx migrate`'s parsed flags (params validated, the evaluation file checked)."""
        from mtonnx import params as params_module

        params = params_module.load(args.params) if args.params else params_module.defaults()
        if args.source_prefix is not None:
            params["model"]["source_prefix"] = args.source_prefix
            params["_hash"] = params_module.params_hash(params)
        eval_file = Path(args.eval_file) if args.eval_file else None
        if eval_file is not None and not eval_file.is_file():
            raise MigrationRefused(f"--eval {eval_file}: no such file (a TSV of source<TAB>reference lines)")
        from mtonnx.variants import registry

        try:
            registry.selected(params["quant"]["recipes"])  # an unknown recipe is refused before anything is built
        except ValueError as err:
            raise MigrationRefused(str(err)) from None
        out = Path(args.out)
        check_out(out, args.overwrite)
        return cls(args.model, out, params, eval_file, args.exporter, args.only_fp32, log)

    @property
    def steps_dir(self) -> Path:
        """Where each finished step's result is kept."""
        return self.out / "steps"

    @property
    def export_dir(self) -> Path:
        """The fp32 export every variant is built from."""
        return self.out / ("export_optimum" if self.exporter == "optimum" else "export_manual")

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(source, reference) of the evaluation set: --eval's TSV, else the packaged set of the params."""
        if self.eval_file is None:
            from mtonnx import data

            return [(p.en, p.zh) for p in data.eval_set(self.params["data"])]
        return read_tsv(self.eval_file)

    def key(self, step: str) -> str:
        """What a step's result depends on: the model's files, the params, the evaluation set, the flags."""
        return buildkey.key_of(
            {
                "step": step,
                "model": self.results["load"]["fingerprint"],
                "params": self.params["_hash"],
                "eval": buildkey.key_of(self.pairs),
                "exporter": self.exporter,
                "only_fp32": self.only_fp32,
                "versions": buildkey.versions("mtonnx"),
            }
        )


def check_out(out: Path, overwrite: bool = False) -> None:
    """MigrationRefused unless `out` is new, empty, or a migration's own (its steps/ is there: a rerun resumes), or
    `overwrite` allows writing among files migrate did not write."""
    if out.exists() and not out.is_dir():
        raise MigrationRefused(f"--out {out} is a file, not a directory: give a directory to write deploy/ into")
    if out.is_dir() and any(out.iterdir()) and not (out / "steps").is_dir() and not overwrite:
        raise MigrationRefused(
            f"--out {out} holds files mtonnx migrate did not write: give a new or empty directory, or --overwrite "
            "to write among them"
        )


def read_tsv(path: Path) -> list[tuple[str, str]]:
    """source<TAB>reference per line (blank lines skipped); MigrationRefused naming the first bad line."""
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise MigrationRefused(f"--eval {path}: line {number} is not source<TAB>reference")
        pairs.append((parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise MigrationRefused(f"--eval {path}: no sentence pairs")
    return pairs


def run(m: Migration) -> Path:
    """Run every step not finished yet (announcing them); returns the deploy directory. A
    failure before any step finished removes the --out it created."""
    m.results["load"] = load(m)
    check_languages(m)
    created = not m.out.exists()
    try:
        m.out.mkdir(parents=True, exist_ok=True)
        m.steps_dir.mkdir(exist_ok=True)
    except OSError as err:
        raise MigrationRefused(f"--out {m.out}: cannot create it ({err.strerror or err})") from None
    try:
        _run_steps(m)
    except BaseException:
        if created and not any(m.steps_dir.iterdir()):  # nothing a rerun could resume: leave no --out behind
            shutil.rmtree(m.out, ignore_errors=True)
        raise
    return m.out / layout.DEPLOY


def _run_steps(m: Migration) -> None:
    """Each step in order, a finished one (its steps/ record holds the same key) reused."""
    from tqdm import tqdm

    m.log(
        f"migrating {m.results['load']['name']} ({m.results['load']['family']}, "
        f"{m.results['load']['parameters'] / 1e6:.1f}M parameters) into {m.out}; steps: " + ", ".join(STEPS[1:])
    )
    for name in tqdm(STEPS[1:], desc="migrate", unit="step", leave=False):
        path, key = m.steps_dir / f"{name}.json", m.key(name)
        done = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if done.get("key") == key:
            m.log(f"reused step {name} (finished earlier, same model, params and evaluation set)")
            m.results[name] = done["result"]
            continue
        start = time.perf_counter()
        m.results[name] = STEP_FUNCTIONS[name](m)
        seconds = round(time.perf_counter() - start, 1)
        write_json(path, {"key": key, "seconds": seconds, "result": m.results[name]})
        m.log(f"step {name} done in {seconds} s")


def load(m: Migration) -> dict[str, Any]:
    """The model resolved (a directory, a built model's name, or a hub name), its family checked."""
    from mtonnx.sources import models

    as_path = Path(m.model)
    block = {"name": as_path.name if as_path.exists() else m.model, "path": str(as_path) if as_path.exists() else None}
    try:
        resolved = models.resolve({**m.params["model"], **block}, models.default_models_dir(), m.params["_root"])
    except models.ModelSourceError as err:
        raise MigrationRefused(str(err)) from None
    config = json.loads((Path(resolved["dir"]) / "config.json").read_text(encoding="utf-8"))
    try:
        family = families.of_type(config.get("model_type"))
    except families.UnknownFamily as err:
        raise MigrationRefused(f"--model {m.model}: {err}") from None
    return {
        "name": resolved["name"],
        "dir": str(resolved["dir"]),
        "family": family.model_type,
        "fingerprint": buildkey.files_fingerprint(resolved["dir"]),
        "parameters": _parameters(config, family),
    }


def check_languages(m: Migration) -> None:
    """MigrationRefused when the evaluation set's references are in another script than the language the model
    translates into (migrate.languages: what is known of both, and the policy)."""
    from mtonnx.migrate import languages

    where = (
        f"--eval {m.eval_file}" if m.eval_file else "the default evaluation set (English→Chinese; --eval replaces it)"
    )
    target = languages.target_of(m.results["load"]["dir"], m.params["model"]["source_prefix"])
    problem = languages.mismatch(target, [reference for _, reference in m.pairs], where)
    if problem:
        raise MigrationRefused(problem)


def _parameters(config: dict[str, Any], family: families.Family) -> int:
    """The parameter count a config implies, roughly (embeddings, attention and feed-forward weights): printed at
    the start, so a user sees the size of what is being migrated."""
    d, vocab = config.get("d_model", 512), config.get("vocab_size", 0)
    decoder = config.get(family.decoder_layers, 6)
    encoder = config.get("encoder_layers", config.get("num_layers", decoder))
    ffn = config.get("encoder_ffn_dim", config.get("d_ff", 4 * d))
    return vocab * d + (encoder + decoder) * (4 * d * d + 2 * d * ffn) + decoder * 4 * d * d


def export(m: Migration) -> dict[str, Any]:
    """The fp32 export, reused when its build key matches."""
    from mtonnx import artefacts
    from mtonnx.settings import Settings

    if m.exporter == "optimum":
        artefacts.optimum_export(m.results["load"]["dir"], m.export_dir, log=m.log)
    else:
        artefacts.export(m.results["load"]["dir"], m.export_dir, Settings.from_params(m.params).export, log=m.log)
    return {"dir": str(m.export_dir), "key": buildkey.recorded(m.export_dir).get("key")}


def _reference(m: Migration):
    from mtonnx.sources.models import load_pretrained

    return load_pretrained(m.results["load"]["dir"])


def parity(m: Migration) -> dict[str, Any]:
    """Every output of every file against PyTorch at shapes the export never saw, within export.tolerance."""
    from mtonnx.check.parity import CASES, file_parity

    tolerance = m.params["export"]["tolerance"]
    result = file_parity(
        _reference(m)[0], m.export_dir, tolerance=tolerance, cases=CASES, files=list(layout.VARIANT_FILES)
    )
    worst_file = max(result["files"], key=lambda f: result["files"][f]["max_abs_diff"])
    worst = result["files"][worst_file]["max_abs_diff"]
    if not result["pass"]:
        raise MigrationFailed(
            f"parity: max |ONNX - PyTorch| {worst:.2e} in {worst_file} is above export.tolerance {tolerance:g}"
            + _parity_hint(m)
        )
    return {"max_abs_diff": worst, "file": worst_file, "tolerance": tolerance}


def _parity_hint(m: Migration) -> str:
    """What a parity failure points to where the family and exporter say so: the TorchScript tracer stores a
    relative position bias computed from the sample's lengths (T5) as a constant."""
    family = families.of_type(m.results["load"]["family"])
    if (
        m.exporter == "manual"
        and m.params["export"]["exporter"] == "torchscript"
        and family.positions == "relative buckets"
    ):
        return (
            f"; {family.label}'s relative position bias was traced at the export sample's lengths by the TorchScript "
            "exporter: set export.exporter: dynamo, which keeps them symbolic"
        )
    return ""


def tokens(m: Migration) -> dict[str, Any]:
    """The torch-free runtime's tokens against `generate`, greedy and beam, on the first runtime.parity_sentences
    evaluation sentences: every one must be identical."""
    from mtonnx.check.parity import runtime_parity
    from mtonnx.runtime import Translator

    model, tokenizer = _reference(m)
    g = m.params["generation"]
    sources = [en for en, _ in m.pairs][: m.params["runtime"]["parity_sentences"]]
    translator = Translator(m.export_dir, decoder="split")
    out = {}
    for search, beams in (("greedy", 1), ("beam", g["num_beams"])):
        result = runtime_parity(
            translator,
            model,
            tokenizer,
            sources,
            num_beams=beams,
            batch_size=g["batch_size"],
            max_new_tokens=g["max_new_tokens"],
            source_prefix=m.params["model"]["source_prefix"],
        )
        if result["match"] < 1.0:
            raise MigrationFailed(
                f"tokens: {result['match']:.1%} of {result['sentences']} sentences identical to generate ({search}, "
                f"beams {beams}); the threshold is 100%"
            )
        out[f"export, {search}, batched"] = result["match"]
    return out


def _where(m: Migration):
    from mtonnx.pipeline.stages import Where

    return Where(Path(m.results["load"]["dir"]), m.export_dir, m.out, Path(m.params["_root"]))


def pipeline(m: Migration) -> dict[str, Any]:
    """The lab's variant pipeline, whole (pipeline.stages.run): the registry's variants (only fp32 with
    --only-fp32), their gates, the objective beside the peers, the recommendation, deploy/ and its card. Unless
    --only-fp32, a variant besides fp32 must pass every gate."""
    from mtonnx import data
    from mtonnx.lab.webpage import PageSession
    from mtonnx.pipeline import stages
    from mtonnx.settings import Settings

    described = (
        f"{m.eval_file}, {len(m.pairs)} sentence pairs (yours)" if m.eval_file else data.describe(m.params["data"])
    )
    try:
        result = stages.run(
            _where(m),
            Settings.from_params(m.params),
            [en for en, _ in m.pairs],
            [zh for _, zh in m.pairs],
            model=m.results["load"]["name"],
            family=m.results["load"]["family"],
            data=described,
            only_fp32=m.only_fp32,
            page=PageSession,
            log=m.log,
        )
    except stages.GatesFailed as err:
        raise MigrationFailed(str(err)) from None
    except ValueError as err:  # an unknown recipe
        raise MigrationRefused(str(err)) from None
    return {
        "quant": stages.quant_section(result),
        "deploy": stages.deploy_section(result),
        "web": stages.web_section(result),
    }


def report(m: Migration) -> dict[str, Any]:
    """metrics.json (the lab's keys, with the run's fingerprint: what `mtonnx compare` reads), env.json, the card
    stamped with the fingerprint, and report.html (the lab report's first screen)."""
    import os

    from mtonnx.lab import environment
    from mtonnx.lab.finish import finish
    from mtonnx.report.record import record

    env = environment.collect({**m.params, "model": {**m.params["model"], "name": m.results["load"]["name"]}})
    write_json(m.out / "env.json", env)
    record(m.out, "runtime", {"parity": m.results["tokens"]})
    record(m.out, "manual_export", {"parity_pass": True, "max_abs_diff_worst": m.results["parity"]["max_abs_diff"]})
    record(m.out, "quant", m.results["pipeline"]["quant"])
    record(m.out, "deploy", m.results["pipeline"]["deploy"])
    record(m.out, "web", m.results["pipeline"].get("web", {}))
    identity, index = finish(m.out, env)
    os.replace(index, m.out / "report.html")
    return {"fingerprint": identity["fingerprint"]}


STEP_FUNCTIONS: dict[str, Callable[[Migration], dict[str, Any]]] = {
    "export": export,
    "parity": parity,
    "tokens": tokens,
    "pipeline": pipeline,
    "report": report,
}
