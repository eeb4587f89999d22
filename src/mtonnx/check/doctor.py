"""`mtonnx doctor`: check an export directory against its source model and say what is wrong and how to fix it.

Each check returns (status, evidence, fix) with status ok / warn / fail / skip; any fail makes the command exit 1.
It checks what `mtonnx translate` would run: every file against the directory's SHA256SUMS first (a damaged file
stops the diagnosis), the layout `Translator(decoder="auto")` picks, every file of it loaded, its greedy tokens
against the source model. It works on the hand export, optimum's export and any variant: numerical checks are
strict for fp32 files; quantized or fp16 ones warn within the stated limits (QUANTIZED_LOGITS_LIMIT,
QUANTIZED_GREEDY_MIN) of what int8 is expected to move, and fail beyond them.
With the core install (no lab extra) the checks that need onnx or torch are skipped, each saying so; a missing
or unreadable source model is a row, never a traceback.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx.runtime import families, layout, layouts

RUNTIME_FILES = layout.VARIANT_FILES
QUANTIZED_OPS = {
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearMatMul",
}
TRAINING_OPS = {"Dropout", "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli"}
LAB = "needs the lab extra (pip install 'mtonnx[lab]')"
# A quantized or fp16 export may move the outputs this far from PyTorch's (a warning); beyond it, it is broken.
QUANTIZED_LOGITS_LIMIT = 0.8  # max |diff| / scale of any output: near 1, the outputs no longer follow PyTorch's
QUANTIZED_GREEDY_MIN = 0.2  # the share of sentences whose greedy tokens equal generate's (int8's gate asks 80 %)


@dataclass
class Check:
    """One row of the doctor's table."""

    check: str
    status: str
    evidence: str
    fix: str = ""


@dataclass
class Subject:
    """What the checks look at: the export, the layout translate would pick, and the source model (if it loads)."""

    onnx_dir: Path
    model_dir: Path | None
    tolerance: float = 1e-4
    sentences: list[str] = field(default_factory=list)
    layout: str | None = None
    model_error: str | None = None

    @cached_property
    def graphs(self) -> dict[str, Any]:
        """The split layout's graphs without their weights (enough for ops and dtypes; no external data read)."""
        import onnx

        return {
            f: onnx.load(str(self.onnx_dir / f), load_external_data=False)
            for f in RUNTIME_FILES
            if (self.onnx_dir / f).is_file()
        }

    @cached_property
    def reference(self):
        """(PyTorch model, tokenizer) of the source model."""
        from mtonnx.sources.models import load_pretrained

        return load_pretrained(self.model_dir)

    @cached_property
    def family(self) -> families.Family:
        """The export's family (runtime.families), from its config.json."""
        return families.of_dir(self.onnx_dir)


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _ops(model) -> set[str]:
    import onnx

    ops = set()
    for node in model.graph.node:
        ops.add(node.op_type)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                ops |= {n.op_type for n in attribute.g.node}
    return ops


def precision(graphs: dict[str, Any]) -> str:
    """fp32, int8 (any quantized op) or fp16 (float16 weights)."""
    import onnx

    if any(_ops(g) & QUANTIZED_OPS for g in graphs.values()):
        return "int8"
    if any(i.data_type == onnx.TensorProto.FLOAT16 for g in graphs.values() for i in g.graph.initializer):
        return "fp16"
    return "fp32"


def check_integrity(s: Subject) -> Check:
    """Every file the directory's SHA256SUMS lists is there with its bytes (runtime.integrity); a directory without
    the list is a warning: it cannot be verified."""
    from mtonnx.runtime import integrity

    name = f"files match {layout.SUMS}"
    try:
        checked = integrity.verify(s.onnx_dir)
    except integrity.IntegrityError as err:
        return Check(name, "fail", str(err), "copy the directory again from where it was built")
    if checked is None:
        return Check(
            name,
            "warn",
            f"no {layout.SUMS}: the files cannot be verified",
            f"re-export it with this version, or list them: sha256sum * > {layout.SUMS}",
        )
    return Check(name, "ok", f"{checked} files, each with its SHA-256")


def check_files(s: Subject) -> Check:
    """Every ONNX file of the directory loads in ORT; the layout translate picks is named."""
    from mtonnx.runtime.sessions import make_session
    from mtonnx.runtime.translator import ModelDirError, pick_layout

    name = "every ONNX file loads"
    try:
        s.layout = pick_layout(s.onnx_dir)
    except ModelDirError:
        missing = [f for f in RUNTIME_FILES if not (s.onnx_dir / f).is_file()]
        return Check(
            name,
            "fail",
            f"missing {', '.join(missing)}",
            "export encoder, decoder and decoder-with-past (mtonnx.export.manual.export_manual or optimum)",
        )
    # Every ONNX file the directory holds, not only the default layout's: `--decoder` can load any of them.
    files = list(dict.fromkeys([*layouts.BY_NAME[s.layout].files, *sorted(p.name for p in s.onnx_dir.glob("*.onnx"))]))
    for f in files:
        try:
            make_session(s.onnx_dir / f)
        except Exception as err:  # the load error itself is the evidence
            external = layout.WEIGHTS in str(err) or "external" in str(err).lower()
            return Check(
                name,
                "fail",
                f"{f}: {' '.join(str(err).split())[:200]}",
                f"copy the whole directory ({layout.WEIGHTS} holds the weights)"
                if external
                else "re-export it; check onnxruntime supports the opset",
            )
    return Check(name, "ok", f"{s.layout} layout: {', '.join(files)}")


def _dynamic_axes(file: str, name: str) -> tuple[int, ...]:
    """Axes the runtime varies at run time for each input (decoder_with_past takes exactly one new token)."""
    if name.startswith("past_key_values"):
        return (0, 2)
    if name == "input_ids" and file == layout.DECODER_WITH_PAST:
        return (0,)
    return (0, 1)


def check_inputs(s: Subject) -> Check:
    """Ids and masks are int64; batch, sequence and past dims are symbolic, not frozen (read off ORT sessions)."""
    from mtonnx.runtime.sessions import make_session

    problems = []
    for file in (f for f in RUNTIME_FILES if (s.onnx_dir / f).is_file()):
        for value in make_session(s.onnx_dir / file).get_inputs():
            dtype = value.type.removeprefix("tensor(").removesuffix(")")
            if ("ids" in value.name or "mask" in value.name) and dtype != "int64":
                problems.append(f"{file}:{value.name} is {dtype}, not int64")
            dims = list(value.shape)
            static = [i for i in _dynamic_axes(file, value.name) if i < len(dims) and isinstance(dims[i], int)]
            if static:
                problems.append(f"{file}:{value.name} is fixed at {[dims[i] for i in static]} on axes {static}")
    if problems:
        return Check(
            "input names, dtypes, dynamic dims",
            "fail",
            "; ".join(problems[:4]),
            "export with int64 ids and dynamic axes for batch, source/target and past length",
        )
    return Check("input names, dtypes, dynamic dims", "ok", "int64 ids; batch, sequence and past dims symbolic")


def check_opset(s: Subject) -> Check:
    """Every file has an opset of at least 14 (attention needs it)."""
    opsets = {
        f: next((o.version for o in g.opset_import if o.domain in ("", "ai.onnx")), 0) for f, g in s.graphs.items()
    }
    low = {f: v for f, v in opsets.items() if v < 14}
    if low:
        return Check("opset", "fail", f"{low}", "export with opset >= 14 (attention needs it)")
    return Check("opset", "ok", ", ".join(sorted({str(v) for v in opsets.values()})))


def check_generation(s: Subject) -> Check:
    """The export's start, eos, pad, bad words and forced first and last tokens equal the source model's, and the
    source's follow its family: the start token it decodes from, pad banned where the family bans it, the
    target-language token forced first where the family forces one."""
    name = "start, eos, pad, bad words"
    path = s.onnx_dir / "generation_config.json"
    if not path.is_file():
        return Check(
            name,
            "fail",
            "no generation_config.json beside the ONNX files",
            "copy the source model's generation_config.json into the export directory",
        )
    exported = json.loads(path.read_text())
    source = json.loads((s.model_dir / "generation_config.json").read_text())
    keys = (
        "decoder_start_token_id",
        "eos_token_id",
        "pad_token_id",
        "bad_words_ids",
        "forced_eos_token_id",
        "forced_bos_token_id",
    )
    differ = {k: (exported.get(k), source.get(k)) for k in keys if exported.get(k) != source.get(k)}
    family = s.family
    rules = family_rules(family, source)
    if differ:
        return Check(
            name,
            "fail",
            "; ".join(f"{k}: export {a} vs model {b}" for k, (a, b) in differ.items()),
            f"{family.label}: {'; '.join(rules)}; copy the source model's generation_config.json",
        )
    broken = [rule for rule, holds in rules.items() if not holds]
    if broken:
        return Check(name, "warn", f"the source model is not shaped as {family.label} is: {'; '.join(broken)}")
    start, eos = source.get("decoder_start_token_id"), source.get("eos_token_id")
    forced = f", forced first {source['forced_bos_token_id']}" if family.forced_first_token else ""
    banned = ", pad banned" if family.bans_pad else ""
    return Check(name, "ok", f"start = {family.decoder_start} = {start}, eos = {eos}{forced}{banned}")


def family_rules(family: families.Family, config: dict[str, Any]) -> dict[str, bool]:
    """What a family's generation config must say, in words, and whether `config` says it: the token decoding starts
    from, pad banned where the family bans it, the target-language token forced first where it forces one."""
    pad, eos = config.get("pad_token_id"), config.get("eos_token_id")
    rules = {
        f"decoding starts from {family.decoder_start} (decoder_start_token_id)": config.get("decoder_start_token_id")
        == {"pad": pad, "eos": eos}[family.decoder_start]
    }
    if family.bans_pad:
        rules["pad is banned (bad_words_ids)"] = [pad] in (config.get("bad_words_ids") or [])
    if family.forced_first_token:
        rules["the target-language token is forced first (forced_bos_token_id)"] = (
            config.get("forced_bos_token_id") is not None
        )
    return rules


def check_vocab(s: Subject) -> Check:
    """vocab.json has as many entries as the logits have columns."""
    from mtonnx.runtime import ModelDirError, Translator

    try:
        Translator(s.onnx_dir, decoder=s.layout or "auto", verify=False)  # check_integrity did
    except ModelDirError as err:
        return Check("tokenizer vocab = logits size", "fail", str(err), "use the vocab.json of the exported model")
    return Check("tokenizer vocab = logits size", "ok", "the tokenizer's ids match the logits dimension")


def check_vocab_entries(s: Subject) -> Check:
    """The export's tokenizer has the source model's entries with the same ids (a shuffled table translates to
    garbage), as the runtime reads both directories' tokenizer files."""
    from mtonnx.runtime.tokenizer import load_tokenizer

    name = "tokenizer vocabulary = the source model's"
    exported, source = (load_tokenizer(d).encoder for d in (s.onnx_dir, s.model_dir))
    if exported == source:
        return Check(name, "ok", f"{len(source)} entries, same ids")
    moved = [piece for piece, i in source.items() if exported.get(piece) != i]
    files = ", ".join(families.convention_of_dir(s.model_dir)[1].files)
    return Check(
        name,
        "fail",
        f"{len(moved)} of {len(source)} entries differ (e.g. {moved[:3]})",
        f"copy the tokenizer files ({files}) from the model the export was made from",
    )


def check_training_ops(s: Subject) -> Check:
    """No dropout or random ops: the model was exported in eval mode."""
    found = {f: sorted(_ops(g) & TRAINING_OPS) for f, g in s.graphs.items() if _ops(g) & TRAINING_OPS}
    if found:
        return Check(
            "no dropout / training-mode ops",
            "fail",
            f"{found}",
            "call model.eval() before exporting: dropout makes outputs change from run to run",
        )
    return Check("no dropout / training-mode ops", "ok", "none")


def check_quantized_lm_head(s: Subject) -> Check:
    """An int8 decoder computes its logits with an integer MatMul, never dequantizing the table."""
    from mtonnx.passes.lm_head import lm_head_report

    name = "int8: integer lm_head, no per-step dequantize"
    if precision(s.graphs) != "int8":
        return Check(name, "ok", "not quantized")
    reports = {f: lm_head_report(s.onnx_dir / f) for f in RUNTIME_FILES if f != layout.ENCODER}
    bad = [f for f, r in reports.items() if r["dequantizes_embedding_every_step"]]
    if bad:
        return Check(
            name,
            "fail",
            f"{', '.join(bad)}: lm_head MatMul is fp32 fed by {reports[bad[0]]['weight_path']}",
            "materialize the transposed embedding before quantize_dynamic (mtonnx.passes.lm_head.untie_lm_head)",
        )
    return Check(name, "ok", ", ".join(sorted({r["lm_head_op"] for r in reports.values()})))


def check_merged(s: Subject) -> Check:
    """A merged decoder is quantized like the split files (its If subgraphs too)."""
    import onnx

    merged = s.onnx_dir / layout.DECODER_MERGED
    if not merged.is_file():
        return Check("merged decoder quantized like the rest", "ok", "no merged decoder")
    if precision(s.graphs) == "int8" and not (_ops(onnx.load(str(merged), load_external_data=False)) & QUANTIZED_OPS):
        return Check(
            "merged decoder quantized like the rest",
            "fail",
            "split files are int8, merged decoder is fp32",
            "quantize_dynamic(..., extra_options={'EnableSubgraph': True})",
        )
    return Check("merged decoder quantized like the rest", "ok", "consistent")


def check_parity(s: Subject) -> Check:
    """Every output within `tolerance` of PyTorch at two unseen shapes (a warning for int8/fp16); a decoder whose
    logits are PyTorch's times the inverse of the family's head rescale is named (T5's tied lm_head read without
    it)."""
    from mtonnx.check.parity import CASES, file_parity, logits_ratio
    from mtonnx.export.wrappers import head_scale

    model = s.reference[0]
    result = file_parity(model, s.onnx_dir, tolerance=s.tolerance, cases=CASES[:2], files=list(RUNTIME_FILES))
    worst = max(f["max_scaled_diff"] for f in result["files"].values())
    if result["pass"]:
        return Check("logits parity at two shapes", "ok", f"max |diff| / scale {worst:.1e} <= {s.tolerance}")
    kind = precision(s.graphs)
    status = "warn" if kind != "fp32" and worst <= QUANTIZED_LOGITS_LIMIT else "fail"
    limit = f", <= {QUANTIZED_LOGITS_LIMIT} expected of {kind}" if kind != "fp32" else ""
    evidence = f"max |diff| / scale {worst:.2e} > {s.tolerance} ({kind}{limit})"
    scale = head_scale(model)
    if scale != 1.0 and abs(logits_ratio(model, s.onnx_dir) * scale - 1) < 1e-3:
        return Check(
            "logits parity at two shapes",
            "fail",
            f"{evidence}: the logits are {1 / scale:g} times PyTorch's, the tied lm_head reads the decoder output "
            f"without {s.family.label}'s rescale by d_model**-0.5",
            "multiply the decoder output by d_model**-0.5 before a tied lm_head (export.wrappers does)",
        )
    fix = (
        "re-export in eval mode with the family's logits head (export.wrappers); check the wrappers"
        if kind == "fp32"
        else "the outputs are far beyond what quantization moves: copy the directory again, or rebuild the variant"
    )
    return Check("logits parity at two shapes", status, evidence, "" if status == "warn" else fix)


def check_padding(s: Subject) -> Check:
    """A sentence padded into a batch, on each side its family's positions allow (runtime.families), encodes as it
    does alone: the positions follow the padding (M2M100's come from the ids) and nothing was frozen at the export
    sample's length (T5's relative position bias). Quantized files are skipped: their activation scale spans the
    batch, so a padded row moves in its last bits."""
    from mtonnx.runtime.sessions import make_session
    from mtonnx.runtime.tokenizer import load_tokenizer

    name = "padding keeps a sentence's encoding"
    kind = precision(s.graphs)
    if kind != "fp32":
        return Check(name, "skip", f"{kind}: the activation scale spans the batch, a padded row moves")
    family = s.family
    tokenizer = load_tokenizer(s.onnx_dir)
    rows = [tokenizer.encode(f"{family.source_prefix} {text}".strip()) for text in _short_and_long()]
    encoder = make_session(s.onnx_dir / layout.ENCODER)

    def encode(side: str) -> np.ndarray:
        """Row 0's encoding at its real positions, in a batch padded on `side` ("alone": row 0 by itself)."""
        batch = rows[:1] if side == "alone" else rows
        width = max(len(r) for r in batch)
        ids = np.full((len(batch), width), tokenizer.pad_token_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, row in enumerate(batch):
            span = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[i, span], mask[i, span] = row, 1
        hidden = encoder.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]
        return hidden[0][mask[0] == 1]

    try:
        alone = encode("alone")
        scale = max(1.0, float(np.abs(alone).max()))
        worst = {side: float(np.abs(encode(side) - alone).max()) / scale for side in family.padding_invariant()}
    except Exception as err:  # ORT refuses the other length: a shape frozen at the export sample's
        return Check(
            name,
            "fail",
            f"{layout.ENCODER} fails on a source of {len(rows[0])} or {len(rows[1])} tokens "
            f"({type(err).__name__}: {' '.join(str(err).split())[:160]}): {frozen_cause(family)}",
            "export with every length dynamic and nothing computed from the example's shape in Python",
        )
    bad = {side: diff for side, diff in worst.items() if diff > s.tolerance}
    if bad:
        return Check(
            name,
            "fail",
            "; ".join(f"{side}-padded: max |diff| / scale {diff:.1e} from batch 1" for side, diff in bad.items())
            + f": {family.label}'s positions are {families.POSITIONS[family.positions]}",
            "compute the positions as the model does (export.wrappers keeps the model's own code)",
        )
    return Check(name, "ok", ", ".join(f"{side}-padded = batch 1" for side in worst))


def frozen_cause(family: families.Family) -> str:
    """What a shape frozen at the export's length points to in this family."""
    if family.positions == "relative buckets":
        return "the relative position bias was traced at the export sample's length"
    return "a shape was frozen at the export sample's"


def _short_and_long() -> tuple[str, str]:
    """The shortest and the longest of a few evaluation sentences (the short one gets padded)."""
    from mtonnx import data

    pairs = sorted(data.eval_set({"hsk_size": 4, "techdocs_size": 2, "eval_split": "test"}), key=lambda p: len(p.en))
    return pairs[0].en, pairs[-1].en


def check_greedy(s: Subject) -> Check:
    """Greedy tokens of the layout translate picks equal PyTorch generate's on a few sentences."""
    from mtonnx import data
    from mtonnx.check.parity import runtime_parity
    from mtonnx.runtime import Translator

    name = f"greedy tokens = generate ({s.layout} layout)"
    sentences = s.sentences or [p.en for p in data.eval_set({"hsk_size": 3, "techdocs_size": 2, "eval_split": "test"})]
    try:
        model, tokenizer = s.reference
        translator = Translator(s.onnx_dir, decoder=s.layout or "auto", verify=False)  # check_integrity did
        result = runtime_parity(
            translator,
            model,
            tokenizer,
            sentences,
            num_beams=1,
            batch_size=len(sentences),
            max_new_tokens=16,
            source_prefix=s.family.source_prefix,
        )
    except Exception as err:  # e.g. int32 inputs: the runtime's int64 feeds are rejected
        return Check(
            name,
            "fail",
            f"{type(err).__name__}: {' '.join(str(err).split())[:160]}",
            "the export must accept the runtime's int64 ids and return logits + present K/V",
        )
    if result["match"] == 1.0:
        return Check(name, "ok", f"{result['sentences']} sentences token-identical")
    kind = precision(s.graphs)
    status = "warn" if kind != "fp32" and result["match"] >= QUANTIZED_GREEDY_MIN else "fail"
    limit = f" (at least {QUANTIZED_GREEDY_MIN:.0%} expected of {kind})" if kind != "fp32" else ""
    return Check(
        name,
        status,
        f"{result['match']:.0%} of {result['sentences']} identical{limit}",
        "" if status == "warn" else "check start token, bad words and the cache wiring; copy the directory again",
    )


# (check, needs the source model, python modules it needs beyond the core install)
CHECKS: list[tuple[Callable[[Subject], Check], bool, tuple[str, ...]]] = [
    (check_inputs, False, ()),
    (check_opset, False, ("onnx",)),
    (check_generation, True, ()),
    (check_vocab, False, ()),
    (check_vocab_entries, True, ()),
    (check_training_ops, False, ("onnx",)),
    (check_quantized_lm_head, False, ("onnx",)),
    (check_merged, False, ("onnx",)),
    (check_padding, False, ("onnx",)),
    (check_parity, True, ("onnx", "torch", "transformers")),
    (check_greedy, True, ("torch", "transformers")),
]


def source_of(onnx_dir: Path, depth: int = 4) -> Path | None:
    """The source model an export records (export_manifest.json's `source`), following a variant's manifest back to
    the export it was built from (a deploy directory, a variant of a variant), if it still exists."""
    for _ in range(depth):
        for manifest in (layout.EXPORT_MANIFEST, layout.VARIANT_MANIFEST):
            try:
                source = json.loads((onnx_dir / manifest).read_text(encoding="utf-8")).get("source")
            except (OSError, ValueError, AttributeError):
                continue
            break
        else:
            return None
        if not isinstance(source, str) or not Path(source).is_dir():
            return None
        if manifest == layout.EXPORT_MANIFEST:
            return Path(source)
        onnx_dir = Path(source)
    return None


def source_problem(model_dir: Path | None) -> str | None:
    """Why the source model cannot be compared with (None when it can)."""
    if model_dir is None:
        return "no source model given, and the export's manifest names none that exists here"
    if not model_dir.is_dir():
        return f"{model_dir} does not exist"
    try:
        files = families.convention_of_dir(model_dir)[1].files
    except ValueError as err:
        return f"{model_dir}: {err}"
    missing = [f for f in ("config.json", "generation_config.json", *files) if not (model_dir / f).is_file()]
    return f"{model_dir} has no {', '.join(missing)}" if missing else None


def diagnose(
    onnx_dir: str | Path,
    source: str | Path | None = None,
    tolerance: float = 1e-4,
    sentences: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Run every check on the export `onnx_dir` against its source model `source` (default: the one its manifest
    records), stopping after a failed integrity or file check; returns the rows. Without a source model the checks
    that compare with it are skipped, each saying so."""
    onnx_dir = Path(onnx_dir)
    given = source is not None
    subject = Subject(onnx_dir, Path(source) if given else source_of(onnx_dir), tolerance, sentences or [])
    rows = []
    for first in (check_integrity, check_files):
        rows.append(first(subject))
        if rows[-1].status == "fail":
            return [asdict(r) for r in rows]
    problem = source_problem(subject.model_dir)
    if problem and given:
        rows.append(
            Check(
                "source model",
                "fail",
                problem,
                "give the model the export was made from: --source (a Hugging Face directory)",
            )
        )
    for check, needs_source, modules in CHECKS:
        if needs_source and problem:
            rows.append(Check(check.__name__.removeprefix("check_"), "skip", f"{problem}: give --source to compare"))
        elif not _has(*modules):
            rows.append(Check(check.__name__.removeprefix("check_"), "skip", LAB))
        else:
            try:
                rows.append(check(subject))
            except Exception as err:  # a check that cannot even run is itself a finding
                rows.append(
                    Check(
                        check.__name__.removeprefix("check_"),
                        "fail",
                        f"{type(err).__name__}: {' '.join(str(err).split())[:160]}",
                    )
                )
    return [asdict(r) for r in rows]


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table for the terminal."""
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in ("check", "status")}
    lines = [f"{'check':<{widths['check']}}  {'status':<{widths['status']}}  evidence / fix"]
    for r in rows:
        lines.append(f"{r['check']:<{widths['check']}}  {r['status']:<{widths['status']}}  {r['evidence']}")
        if r["fix"] and r["status"] not in ("ok", "skip"):
            lines.append(f"{'':<{widths['check']}}  {'':<{widths['status']}}  fix: {r['fix']}")
    return "\n".join(lines)
