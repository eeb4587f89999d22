"""The peer benchmark: the same model and sentences through PyTorch (fp32, dynamic int8), optimum's ORT model,
the project's runtime (fp32, int8) and CTranslate2 (fp32, int8), at forced output lengths.

Random weights stop anywhere, so every engine is forced to exactly N new tokens (min = max, eos suppressed).
Tokenization is outside the timed region: every engine gets the same token ids. Repetitions are interleaved
across engines; multi-thread configurations run one engine per process (each engine brings its own thread
pool, and several in one process fight over 2 vCPUs).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mtonnx import engines
from mtonnx.measure.timing import interleaved
from mtonnx.variants import registry


@dataclass(frozen=True)
class Config:
    """One benchmark configuration."""

    batch: int
    beams: int
    threads: int
    tokens: int
    corpus: bool = False  # every row at its real length: batches of at most `batch`, up to `tokens` new tokens

    @property
    def name(self) -> str:
        """b<batch>_beam<beams>_t<threads>_n<tokens> (corpus_... for a corpus run)."""
        return f"{'corpus_' if self.corpus else ''}b{self.batch}_beam{self.beams}_t{self.threads}_n{self.tokens}"


@dataclass(frozen=True)
class Paths:
    """Where each engine's files are (all derived from one source model)."""

    model_dir: str
    fp32_export: str
    variants: str  # the variant registry's builds of fp32_export, one directory per recipe (what mtonnx engines load)
    optimum_dir: str
    ct2_fp32: str
    ct2_int8: str
    ct2_vmap_int8: str = ""  # CTranslate2 int8 with the shortlist as its vocabulary map (measure.benchmark.shortlist)

    def variant(self, recipe: str) -> str:
        """The directory of one of the registry's variants."""
        return str(Path(self.variants) / recipe)

    @property
    def int8_variant(self) -> str:
        """The registry's int8: the ablation's starting point."""
        return self.variant("int8")

    @property
    def fp32_tuned(self) -> str:
        """fp32-tuned: what the search study compares the fp32 search graph with."""
        return self.variant("fp32-tuned")

    @property
    def int8_tuned(self) -> str:
        """int8-tuned: what the output-row studies cut."""
        return self.variant("int8-tuned")

    @property
    def search_fp32(self) -> str:
        """The search inside the graph over fp32-tuned's split files (fp32-search-graph)."""
        return self.variant("fp32-search-graph")


# Built for the benchmark: every engine's recipe that needs nothing but the export (the shortlist's is built by its
# study), the ablation's starting point and the search study's fp32 reference.
PEER_VARIANTS = tuple(
    dict.fromkeys(
        ["int8", "fp32-tuned", "fp32-search-graph"]
        + [e.variant for e in engines.ENGINES if e.variant and registry.BY_NAME[e.variant].needs is None]
    )
)


def prepare(
    model_dir: str | Path,
    work_dir: str | Path,
    exporter: str = "dynamo",
    opset: int = 18,
    ct2: bool = True,
    log: Callable[[str], None] | None = None,
) -> Paths:
    """The engines' files, each built only when its build key does not match (foundation.buildkey): the hand export
    and optimum's, the registry's int8, tuned and search-graph variants (the registry builds them; the benchmark
    times what the variant table measures), CTranslate2's conversions (keyed by the model and its version)."""
    from mtonnx import artefacts
    from mtonnx.settings import Export

    work = Path(work_dir)
    manual, variants, optimum = work / "export_manual", work / "variants", work / "export_optimum"
    artefacts.export(model_dir, manual, Export(exporter=exporter, opset=opset), log=log)
    artefacts.build(manual, variants, PEER_VARIANTS, log=log, required=True)
    paths = Paths(
        str(model_dir),
        str(manual),
        str(variants),
        str(optimum),
        str(work / "ct2" / "fp32"),
        str(work / "ct2" / "int8"),
    )
    artefacts.optimum_export(model_dir, optimum, log=log)
    for target, quantization in ((paths.ct2_fp32, "float32"), (paths.ct2_int8, "int8")) if ct2 else ():
        ensure_ct2(model_dir, target, quantization, log)
    return paths


def ensure_ct2(
    model_dir: str | Path, target: str | Path, quantization: str, log: Callable[[str], None] | None = None
) -> None:
    """CTranslate2's conversion of the model, unless `target` holds one of the same model files, quantization and
    ctranslate2 version (foundation.buildkey); converted into a staging directory moved into place when complete."""
    from mtonnx.foundation import buildkey
    from mtonnx.foundation.files import staged_dir

    def convert() -> None:
        from ctranslate2.converters import TransformersConverter

        with staged_dir(target) as tmp:
            TransformersConverter(str(model_dir)).convert(str(tmp), quantization=quantization, force=True)

    parts = {
        "model": buildkey.files_fingerprint(model_dir),
        "quantization": quantization,
        "versions": buildkey.versions("ctranslate2"),
    }
    buildkey.reuse_or_build(target, parts, convert, log)


class Engine:
    """One engine of mtonnx.engines, loaded once; `run` generates exactly `tokens` new tokens for a batch of
    source ids."""

    def __init__(self, name: str, paths: Paths, threads: int):
        self.name, self.paths, self.threads = name, paths, threads
        self.spec = engines.BY_NAME[name]
        self.kind, self.precision = self.spec.kind, self.spec.precision
        config = json.loads((Path(paths.fp32_export) / "generation_config.json").read_text())
        self.pad_id = config["pad_token_id"]  # read once here, never inside the timed run()
        LOADERS[self.kind](self)

    def _load_pytorch(self) -> None:
        import torch

        from mtonnx.sources.models import load_pretrained

        torch.set_num_threads(self.threads)
        self.model, _ = load_pretrained(self.paths.model_dir)
        if self.precision == "int8":
            self.model = torch.ao.quantization.quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8)

    def _load_optimum(self) -> None:
        import onnxruntime as ort
        from optimum.onnxruntime import ORTModelForSeq2SeqLM

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.model = ORTModelForSeq2SeqLM.from_pretrained(
            self.paths.optimum_dir, use_cache=True, session_options=options, provider="CPUExecutionProvider"
        )

    def _load_mtonnx(self) -> None:
        from mtonnx.runtime import SessionSettings, Translator

        session = SessionSettings(threads=self.threads)
        self.model = Translator(self.paths.variant(self.spec.variant), decoder="auto", session=session)

    def _load_mtonnx_search(self) -> None:
        from mtonnx.runtime import SessionSettings
        from mtonnx.runtime.search_graph import SearchGraph

        self.model = SearchGraph(self.paths.variant(self.spec.variant), SessionSettings(threads=self.threads))

    def _load_ct2(self) -> None:
        import ctranslate2

        from mtonnx.runtime import load_tokenizer

        int8 = self.precision == "int8"
        directory = self.paths.ct2_vmap_int8 if self.spec.vmap else self.paths.ct2_int8 if int8 else self.paths.ct2_fp32
        self.model = ctranslate2.Translator(
            directory,
            device="cpu",
            intra_threads=self.threads,
            inter_threads=1,
            compute_type="int8" if self.precision == "int8" else "float32",
        )
        tokenizer = load_tokenizer(self.paths.fp32_export)
        self.pieces = tokenizer.decoder

    def corpus(self, rows: list[list[int]], beams: int, tokens: int, batch: int) -> int:
        """Translate every row at its real length (stopping at eos, at most `tokens` new tokens) in batches of at
        most `batch`, each engine sorting by length its own way (CTranslate2: max_batch_size, mtonnx: the runtime's
        Translator.generate_sorted); returns the number of generated tokens without eos. The engines of kind ct2
        and mtonnx only (mtonnx.engines.CORPUS)."""
        if self.kind == "ct2":
            source = [[self.pieces[i] for i in row] for row in rows]
            out = self.model.translate_batch(source, max_batch_size=batch, beam_size=beams, max_decoding_length=tokens)
            return sum(len(r.hypotheses[0]) for r in out)
        eos = self.model.settings.eos_token_id
        out = self.model.generate_sorted(rows, batch, num_beams=beams, max_new_tokens=tokens)  # as translate() batches
        return sum(len(r) - (r[-1:] == [eos]) for r in out)

    def run(self, rows: list[list[int]], beams: int, tokens: int) -> int:
        """Generate; returns the number of generated tokens (to check that lengths were really forced)."""
        if self.kind == "ct2":
            source = [[self.pieces[i] for i in row] for row in rows]
            out = self.model.translate_batch(
                source,
                beam_size=beams,
                max_decoding_length=tokens,
                min_decoding_length=tokens,
                num_hypotheses=1,
                use_vmap=self.spec.vmap,
            )
            return sum(len(r.hypotheses[0]) for r in out)
        from mtonnx.runtime.tokenizer import pad

        ids, mask = pad(rows, self.pad_id)
        if self.kind in ("mtonnx", "mtonnx-search"):  # the search graph has no forced eos: `tokens` without eos
            out = self.model.generate(ids, mask, num_beams=beams, max_new_tokens=tokens, min_length=tokens + 1)
            return sum(len(r) for r in out)
        import torch

        with torch.no_grad():
            out = self.model.generate(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                num_beams=beams,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
            )
        return int((out[:, 1:] != self.pad_id).sum())


LOADERS: dict[str, Callable[[Engine], None]] = {
    "pytorch": Engine._load_pytorch,
    "optimum": Engine._load_optimum,
    "mtonnx": Engine._load_mtonnx,
    "mtonnx-search": Engine._load_mtonnx_search,
    "ct2": Engine._load_ct2,
}


def run_configs(
    engines: list[str], paths: Paths, configs: list[Config], rows: list[list[int]], warmup: int, repeats: int
) -> list[dict[str, Any]]:
    """Measure every engine x config in this process, repetitions interleaved across engines."""
    results = []
    for threads in sorted({c.threads for c in configs}):
        loaded = {name: Engine(name, paths, threads) for name in engines}
        for config in [c for c in configs if c.threads == threads]:
            batch = (rows * config.batch)[: config.batch]
            timed = interleaved(
                {
                    name: functools.partial(engine.corpus, rows, config.beams, config.tokens, config.batch)
                    if config.corpus
                    else functools.partial(engine.run, batch, config.beams, config.tokens)
                    for name, engine in loaded.items()
                },
                warmup,
                repeats,
            )
            for name, t in timed.items():
                seconds = t["median_ms"] / 1000
                results.append(
                    {
                        "engine": name,
                        "config": config.name,
                        **asdict(config),
                        **{k: t[k] for k in ("median_ms", "min_ms", "max_ms", "repeats", "times_ms")},
                        "generated_tokens": t["result"],
                        "tokens_per_s": round(
                            (t["result"] if config.corpus else config.batch * config.tokens) / seconds, 1
                        ),
                        **({"sentences_per_s": round(len(rows) / seconds, 2)} if config.corpus else {}),
                    }
                )
    return results


def measure_engines(
    engines: list[str], paths: Paths, configs: list[Config], rows: list[list[int]], warmup: int = 1, repeats: int = 5
) -> list[dict[str, Any]]:
    """1-thread configs in this process; multi-thread configs one engine per fresh process."""
    single = [c for c in configs if c.threads == 1]
    results = run_configs(engines, paths, single, rows, warmup, repeats) if single else []
    multi = [c for c in configs if c.threads > 1]
    for name in engines if multi else []:
        payload = json.dumps(
            {
                "engines": [name],
                "paths": asdict(paths),
                "configs": [asdict(c) for c in multi],
                "rows": rows,
                "warmup": warmup,
                "repeats": repeats,
            }
        )
        done = subprocess.run(
            [sys.executable, "-m", "mtonnx.measure.peers"], input=payload, capture_output=True, text=True, check=True
        )
        results += json.loads(done.stdout.strip().splitlines()[-1])
    baseline = {r["config"]: r["median_ms"] for r in results if r["engine"] == "pytorch-fp32"}
    for r in results:
        r["speedup_vs_pytorch_fp32"] = (
            round(baseline[r["config"]] / r["median_ms"], 2) if r["config"] in baseline else None
        )
    return results


def rss_after_load(
    engines: list[str], paths: Paths, run: tuple[list[list[int]], int, int]
) -> dict[str, dict[str, Any]]:
    """Resident memory (MB) of a fresh process per engine (1 thread) after loading it and after one generation of
    `run` = (rows, beams, tokens), read in that one process: mapped weights count once their pages are read. Per
    engine and reading (`after_load`, `after_run`): `rss_mb` and `kinds_mb` (libraries / anonymous / files,
    measure.probe; None off Linux)."""
    from mtonnx.measure.probe import import_cost

    probed = {
        name: import_cost(
            f"from mtonnx.measure.peers import Engine, Paths\n"
            f"engine = Engine({name!r}, Paths(**{asdict(paths)!r}), 1)\n"
            f"mark('after_load')\n"
            f"engine.run({run[0]!r}, {run[1]}, {run[2]})",
            repeats=1,
        )
        for name in engines
    }
    return {
        name: {
            "after_load": {
                "rss_mb": p["marks"]["after_load"]["rss_mb"],
                "kinds_mb": p["marks"]["after_load"]["rss_kinds_mb"],
            },
            "after_run": {"rss_mb": p["rss_mb"], "kinds_mb": p["rss_kinds_mb"]},
        }
        for name, p in probed.items()
    }


def main() -> int:
    """Subprocess entry: read a JSON job on stdin, print the results as JSON."""
    job = json.loads(sys.stdin.read())
    results = run_configs(
        job["engines"],
        Paths(**job["paths"]),
        [Config(**c) for c in job["configs"]],
        job["rows"],
        job["warmup"],
        job["repeats"],
    )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def contenders(
    model_dir: str | Path,
    work_dir: str | Path,
    tokenizer_dir: str | Path,
    max_new_tokens: int,
    source_prefix: str = "",
    threads: int = 1,
) -> dict[str, Any]:
    """PyTorch fp32 and (when ctranslate2 is installed) CTranslate2 int8 as speed contenders for
    measure.variants.VariantBench.speed: each translates a batch of sentences with a beam count, at natural
    lengths (up to `max_new_tokens`), `threads` threads."""
    import importlib.util

    import torch

    from mtonnx.runtime import GenerationSettings, load_tokenizer
    from mtonnx.sources.models import load_pretrained
    from mtonnx.sources.reference import batch as tokenized

    torch.set_num_threads(threads)
    model, hf_tokenizer = load_pretrained(model_dir)

    def pytorch(sentences: list[str], beams: int) -> Any:
        with torch.no_grad():
            return model.generate(
                **tokenized(hf_tokenizer, sentences, source_prefix), num_beams=beams, max_new_tokens=max_new_tokens
            )

    out = {"pytorch-fp32": pytorch}
    if importlib.util.find_spec("ctranslate2") is not None:
        import ctranslate2

        target = Path(work_dir) / "ct2" / "int8"
        ensure_ct2(model_dir, target, "int8")
        translator = ctranslate2.Translator(
            str(target), device="cpu", intra_threads=threads, inter_threads=1, compute_type="int8"
        )
        tokenizer = load_tokenizer(tokenizer_dir)
        forced = GenerationSettings.from_dir(tokenizer_dir).forced_bos_token_id  # M2M100's target language

        def ct2(sentences: list[str], beams: int) -> Any:
            source = [
                [tokenizer.decoder[i] for i in tokenizer.encode(f"{source_prefix} {s}".strip())] for s in sentences
            ]
            prefix = [[tokenizer.decoder[forced]]] * len(source) if forced is not None else None
            return translator.translate_batch(
                source, target_prefix=prefix, beam_size=beams, max_decoding_length=max_new_tokens
            )

        out["ct2-int8"] = ct2
    return out
