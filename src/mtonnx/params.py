"""Run parameters: load a params YAML file, validate it against one schema, fill defaults.

Validation is hand-written and imports only PyYAML (when a file is loaded) so that a bad params file fails in
well under two seconds, before torch or papermill are imported. Every error is one line that names
the file and the dotted key.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtonnx import engines

# The vocabularies other modules share with the schema (export.manual, measure.peers).
EXPORTERS = ("torchscript", "dynamo")
DEFAULT_EXPORTER, DEFAULT_OPSET = "dynamo", 18
ENGINES = engines.SELECTABLE  # what `bench.engines` may name (mtonnx.engines declares them)
ROOT_ENV = "MTONNX_PROJECT_ROOT"


class ParamsError(ValueError):
    """A params file that cannot be used; str() is the one-line message shown to the user."""


@dataclass(frozen=True)
class Field:
    """One leaf of the schema: its type, default and allowed values."""

    type: type | tuple[type, ...]
    default: Any
    doc: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    must_exist: bool = False  # a path that must exist (relative paths: relative to the params file)
    items: type | None = None  # for lists: the type of every item (lo/hi then apply to the items)
    keywords: tuple[str, ...] = ()  # strings accepted as they are, besides values of `type` (e.g. "all")


SCHEMA: dict[str, Any] = {
    "name": Field(str, None, "run name; defaults to the params file's stem"),
    "project_root": Field(
        str,
        "..",
        f"the checkout holding notebooks/ and models/, relative to the params file (${ROOT_ENV} overrides it)",
    ),
    "model": {
        "name": Field(
            str,
            "tiny",
            "'hsk-enzh', 'tiny', 'tiny-m2m100', 'tiny-nllb', 'tiny-t5', 'opus-shape', or a hub name such as "
            "Helsinki-NLP/opus-mt-en-zh, facebook/m2m100_418M or t5-small",
        ),
        "path": Field(
            str, None, "local directory holding the model (overrides the hub)", nullable=True, must_exist=True
        ),
        "source_prefix": Field(str, "", "text put in front of every source sentence, e.g. '>>cmn_Hans<<'"),
        "seed": Field(int, 0, "seed for the built (random-weight) models", lo=0),
    },
    "data": {
        "hsk_size": Field(
            int, 40, "HSK sentence pairs in the eval set ('all': the whole split)", lo=0, hi=4354, keywords=("all",)
        ),
        "techdocs_size": Field(
            int, 16, "tech-doc sentence pairs in the eval set ('all': 48)", lo=0, hi=48, keywords=("all",)
        ),
        "eval_split": Field(str, "test", "HSK split the eval set draws from", choices=("dev", "test")),
        "calibration_size": Field(int, 64, "calibration sentences (from the HSK train split)", lo=0, hi=4000),
    },
    "export": {
        "exporter": Field(str, DEFAULT_EXPORTER, "torch.onnx exporter for the hand export", choices=EXPORTERS),
        "opset": Field(int, DEFAULT_OPSET, "ONNX opset (dynamo: 18..23, torchscript: 14..20)", lo=14, hi=23),
        "tolerance": Field(float, 1e-4, "max |ONNX - PyTorch| allowed in parity checks", lo=0.0, hi=1.0),
    },
    "runtime": {
        "threads": Field(int, 1, "ONNX Runtime intra-op threads per session", lo=1, hi=64),
        "optimization": Field(str, "all", "graph optimization level", choices=("disable", "basic", "extended", "all")),
        "spinning": Field(bool, False, "let ORT worker threads spin-wait (oversubscribes small machines)"),
        "parity_sentences": Field(int, 48, "sentences the batch-1 and no-cache parity checks run on", lo=1, hi=10000),
    },
    "bench": {
        "warmup": Field(int, 1, "untimed runs before measuring", lo=0, hi=100),
        "repeats": Field(int, 5, "timed runs per measurement (median, min, max reported)", lo=1, hi=1000),
        "lengths": Field(list, [16, 32, 64, 128], "forced output lengths for cost-vs-length", items=int, lo=1, hi=512),
        "engines": Field(list, list(ENGINES), "engines in the peer benchmark", items=str, choices=ENGINES),
        "batches": Field(list, [1, 8], "batch sizes in the peer benchmark", items=int, lo=1, hi=256),
        "beams": Field(list, [1, 4], "beam sizes in the peer benchmark", items=int, lo=1, hi=16),
        "threads": Field(list, [1, 2], "thread counts in the peer benchmark", items=int, lo=1, hi=64),
        "tokens": Field(list, [32, 128], "forced output lengths in the peer benchmark", items=int, lo=1, hi=512),
        "corpus_sentences": Field(
            int,
            0,
            "sentences of the eval set the real-length studies time, evenly spaced so their lengths are the set's "
            "(0: all); quality is always scored on all of them",
            lo=0,
            hi=1_000_000,
        ),
        "restriction_sizes": Field(
            list,
            [32000, 16000, 8000],
            "output rows in the restriction sweep (only sizes between the target side's rows and the vocabulary)",
            items=int,
            lo=1,
            hi=10_000_000,
        ),
        "shortlist_frequent": Field(
            int, 1000, "lexical shortlist: the most common target pieces, always kept", lo=0, hi=10_000_000
        ),
        "shortlist_per_source": Field(
            int, 50, "lexical shortlist: target pieces each source piece brings (most associated)", lo=0, hi=100_000
        ),
    },
    "quant": {
        "gate_bleu": Field(
            float,
            0.5,
            "non-inferiority margin: a variant passes when its BLEU delta's 95 % CI lies above -gate_bleu",
            lo=0.0,
            hi=100.0,
        ),
        "fidelity_min": Field(
            float,
            0.8,
            "fidelity gate: a variant passes when the 95 % CI of its share of sentences identical to fp32's "
            "translation lies at or above this",
            lo=0.0,
            hi=1.0,
        ),
        "invariance_sentences": Field(
            int,
            200,
            "batch invariance gate: sentences (the first of the eval set) each variant translates alone, in batches "
            "and shuffled, at beam 1 and the workload's beams",
            lo=1,
            hi=100_000,
        ),
        "invariance_batch": Field(
            int, 16, "batch invariance gate: the batch size of the batched and shuffled translations", lo=2, hi=256
        ),
        "invariance_exempt": Field(
            dict,
            {},
            "batch invariance gate: variants opted out, each with the reason the report and the model card show "
            "({variant: reason})",
        ),
        "workload_batches": Field(
            list, [1, 8], "the objective: batch sizes of the workload the recommendation times", items=int, lo=1, hi=256
        ),
        "workload_beams": Field(
            int, None, "beams of the workload (default: generation.num_beams, what serve and batch use)", lo=1, hi=16
        ),
        "workload_weights": Field(
            list, None, "weight of each workload batch size in the objective (default: 1 each)", items=float, lo=0.0
        ),
        "workload_corpus": Field(
            int,
            0,
            "the objective as throughput at real lengths: this many sentences of the eval set (evenly spaced), sorted "
            "by length and translated in batches of each workload batch size, each to its end (what `mtonnx batch` "
            "runs); 0: the latency workload (timing_sentences in batches of each size)",
            lo=0,
            hi=100_000,
        ),
        "timing_sentences": Field(
            int, 16, "sentences (the first of the eval set) every variant is timed on", lo=1, hi=10000
        ),
        "speed_repeats": Field(int, 5, "timed repetitions per variant, interleaved across variants", lo=1, hi=100),
        "speed_margin": Field(
            float, 1.1, "faster means at least this ratio in every paired repetition", lo=1.0, hi=10.0
        ),
        "recipes": Field(
            list,
            "all",
            "the registry's recipes to build and measure ('all', or names; fp32, the baseline, always)",
            items=str,
            keywords=("all",),
        ),
        "keep": Field(
            list,
            ["recommended"],
            "variant directories kept after the run ('recommended', 'all', or names): the rest are measured, then "
            "removed (deploy/ keeps the recommended one either way)",
            items=str,
        ),
        "calibration_tokens": Field(int, 16, "decoding steps recorded per calibration batch", lo=1, hi=512),
    },
    "targets": {
        "int8_vs_pytorch_fp32": Field(
            float, 4.0, "notebook 07: the int8 runtime's speed over PyTorch eager fp32 (forced lengths)", lo=0.0
        ),
        "int8_vs_ct2_int8": Field(float, 1.15, "notebook 07: the int8 runtime's speed over CTranslate2 int8", lo=0.0),
        "fp32_vs_optimum_fp32": Field(float, 1.0, "notebook 07: the fp32 runtime's speed over optimum's", lo=0.0),
        "corpus_vs_ct2_int8": Field(
            float, 1.2, "notebook 07: sentences/s over CTranslate2 int8 on the eval corpus at real lengths", lo=0.0
        ),
    },
    "serve": {
        "host": Field(str, "127.0.0.1", "`mtonnx serve`: the address to bind (loopback unless told otherwise)"),
        "port": Field(int, 8000, "`mtonnx serve`: the port", lo=0, hi=65535),
        "threads": Field(int, 1, "ONNX Runtime intra-op threads of the service's model", lo=0, hi=64),
        "max_batch_size": Field(int, 16, "dynamic batching: most sentences per model call", lo=1, hi=256),
        "max_wait_ms": Field(
            float, 0.0, "dynamic batching: how long an idle model waits for a batch to fill", lo=0.0, hi=10000.0
        ),
        "queue_size": Field(
            int, 1024, "sentences waiting at most: a full queue answers 503, a request of more 413", lo=1, hi=1_000_000
        ),
        "request_timeout_s": Field(
            float,
            30.0,
            "a request's body not read within it answers 408, its translation not done within it 504",
            lo=0.1,
            hi=3600.0,
        ),
        "header_timeout_s": Field(
            float, 5.0, "a request's headers not complete within it answer 408 and close", lo=0.1, hi=3600.0
        ),
        "max_body_bytes": Field(int, 1_000_000, "largest request body (413 above)", lo=1, hi=1_000_000_000),
        "max_items": Field(int, 128, "most texts (items of q) per request (413 above)", lo=1, hi=100_000),
        "max_chars": Field(int, 5000, "most characters per text (413 above)", lo=1, hi=1_000_000),
        "log_text": Field(bool, False, "log the texts of requests (off: only method, status, sentences, ms)"),
        "bench_concurrency": Field(
            list, [1, 4, 16, 64], "notebook 11: concurrent clients per load level", items=int, lo=1, hi=4096
        ),
        "bench_seconds": Field(float, 10.0, "notebook 11: seconds of load per level", lo=0.1, hi=3600.0),
    },
    "scale": {
        "engine": Field(str, "local", "`mtonnx batch`: local (one process) or ray", choices=("local", "ray")),
        "workers": Field(int, 2, "Ray actors (one Translator each)", lo=1, hi=4096),
        "threads_per_worker": Field(int, 1, "CPUs and ONNX Runtime threads per actor", lo=1, hi=64),
        "batch_size": Field(int, 32, "sentences per model call, length-sorted within a block", lo=1, hi=256),
        "corpus_lines": Field(
            int,
            2400,
            "notebook 12: lines of the corpus built from the eval and train data (params/scale-study.yaml: more)",
            lo=1,
            hi=1_000_000,
        ),
        "repeats": Field(
            int, 3, "notebook 12: rounds of the 1- and 2-worker runs, alternated (medians, paired speedup)", lo=1, hi=20
        ),
    },
    "compare": {
        "speed_margin": Field(
            float,
            1.5,
            "`mtonnx compare`: a timing changed only when the median ratio of the pairs of the two runs' "
            "repetitions, and the ratio of their medians, are beyond this factor",
            lo=1.0,
            hi=100.0,
        ),
        "size_threshold": Field(
            float, 0.1, "`mtonnx compare`: a relative size or memory change that counts", lo=0.0, hi=10.0
        ),
    },
    "train": {
        "out": Field(str, "../models/hsk-enzh", "where `mtonnx train` writes the model (relative to the params file)"),
        "budget_minutes": Field(float, 75.0, "wall-clock budget for training", lo=0.1, hi=24 * 60),
        "max_steps": Field(int, 6000, "optimizer steps (0: until the budget runs out)", lo=0),
        "max_pairs": Field(int, 0, "use only the first N training pairs (0: all); for smoke tests", lo=0),
        "test_sentences": Field(int, 0, "score on the first N test sentences (0: all)", lo=0),
        "threads": Field(int, 1, "torch threads (1 keeps training deterministic)", lo=1, hi=64),
    },
    "generation": {
        "max_new_tokens": Field(int, 64, "most tokens generated per sentence", lo=1, hi=512),
        "num_beams": Field(int, 4, "beams for beam search", lo=1, hi=16),
        "batch_size": Field(int, 8, "sentences per batch for PyTorch generate", lo=1, hi=256),
    },
}


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a params file; returns the full params (defaults filled) plus `_file`, `_hash` and
    `_root` (the project root: $MTONNX_PROJECT_ROOT, else `project_root` relative to the file)."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise ParamsError(f"{path}: is a directory, not a params file (e.g. params/default.yaml)")
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    try:
        raw = yaml.load(path.read_bytes().decode("utf-8"), Loader=_unique_keys_loader())
    except UnicodeDecodeError as err:
        raise ParamsError(f"{path}: not a text file (byte {err.start} is not UTF-8); a params file is YAML") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ParamsError(f"{path}: not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: the top level must be a mapping of keys, got {type(raw).__name__}")
    params = _validate(raw, SCHEMA, path, prefix="")
    if params["name"] is None:
        params["name"] = path.stem
    params["_file"] = str(path.resolve())
    params["_hash"] = params_hash(params)
    params["_root"] = str(Path(os.environ.get(ROOT_ENV) or path.resolve().parent / params["project_root"]).resolve())
    return params


def defaults() -> dict[str, Any]:
    """The schema's defaults as validated params, for a command run without --params (`_root`: $MTONNX_PROJECT_ROOT,
    else the current directory)."""
    params = _validate({}, SCHEMA, Path("<defaults>"), prefix="")
    params["name"] = "defaults"
    params["_file"] = None
    params["_hash"] = params_hash(params)
    params["_root"] = str(Path(os.environ.get(ROOT_ENV) or Path.cwd()).resolve())
    return params


def _unique_keys_loader():
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML would keep the last silently)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return UniqueKeys


def params_hash(params: dict[str, Any]) -> str:
    """A short, stable hash of the validated params (private `_` keys excluded)."""
    public = {k: v for k, v in params.items() if not k.startswith("_")}
    return hashlib.sha256(json.dumps(public, sort_keys=True).encode()).hexdigest()[:12]


def _validate(raw: dict, schema: dict, file: Path, prefix: str) -> dict[str, Any]:
    for key in raw:
        if key not in schema:
            hint = difflib.get_close_matches(str(key), schema, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else f" (known: {', '.join(schema)})"
            raise ParamsError(f"{file}: unknown key '{prefix}{key}'{suggestion}")
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        dotted = f"{prefix}{key}"
        if isinstance(spec, dict):
            section = raw.get(key, {})
            if section is None:
                section = {}
            if not isinstance(section, dict):
                raise ParamsError(f"{file}: '{dotted}' must be a mapping, got {type(section).__name__}")
            out[key] = _validate(section, spec, file, prefix=f"{dotted}.")
        else:
            out[key] = _check(raw.get(key, spec.default), spec, file, dotted)
    return out


def _as_float(value: Any) -> Any:
    """YAML 1.1 reads `1e-4` as a string and `1` as an int; both are meant as floats."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _check(value: Any, spec: Field, file: Path, key: str) -> Any:
    if isinstance(value, str) and value in spec.keywords:
        return value
    if value is None:
        if spec.nullable or spec.default is None:
            return None
        raise ParamsError(f"{file}: '{key}' must not be empty ({spec.doc})")
    wanted = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    if float in wanted:
        value = _as_float(value)
    if isinstance(value, bool) and bool not in wanted or not isinstance(value, wanted):
        names = " or ".join(t.__name__ for t in wanted)
        raise ParamsError(f"{file}: '{key}' must be {names}, got {type(value).__name__} {value!r}")
    if isinstance(value, dict):
        bad = [k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str) or not v.strip()]
        if bad:
            raise ParamsError(f"{file}: '{key}' maps names to non-empty reasons; '{bad[0]}' has {value[bad[0]]!r}")
        return value
    if spec.items is not None:
        if not isinstance(value, list):
            raise ParamsError(f"{file}: '{key}' must be a list, got {type(value).__name__} {value!r}")
        if spec.items is float:  # as for single floats: YAML reads 1 as an int
            value = [_as_float(v) for v in value]
        bad = [v for v in value if isinstance(v, bool) or not isinstance(v, spec.items)]
        if bad or not value:
            raise ParamsError(f"{file}: '{key}' must be a non-empty list of {spec.items.__name__}, got {value!r}")
        out_of_range = [
            v
            for v in value
            if spec.items in (int, float)
            and (spec.lo is not None and v < spec.lo or spec.hi is not None and v > spec.hi)
        ]
        if out_of_range:
            raise ParamsError(f"{file}: '{key}' has {out_of_range[0]!r}, out of range {spec.lo}..{spec.hi}")
        unknown = [v for v in value if spec.choices is not None and v not in spec.choices]
        if unknown:
            raise ParamsError(f"{file}: '{key}' has {unknown[0]!r}; choose from {', '.join(spec.choices)}")
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ParamsError(f"{file}: '{key}' must be a finite number, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ParamsError(f"{file}: '{key}' must be one of {', '.join(map(str, spec.choices))}, got {value!r}")
    if spec.lo is not None and value < spec.lo or spec.hi is not None and value > spec.hi:
        bounds = f"{spec.lo if spec.lo is not None else '-inf'}..{spec.hi if spec.hi is not None else 'inf'}"
        raise ParamsError(f"{file}: '{key}' = {value!r} is out of range {bounds}")
    if spec.must_exist:
        resolved = (file.parent / value).resolve()
        if not resolved.exists():
            raise ParamsError(f"{file}: '{key}' points to {resolved}, which does not exist")
        return str(resolved)
    return value
