"""Proof that exported files compute what PyTorch computes.

- `check_files`: onnx.checker and shape inference on each file; the ORT session's I/O next to the manifest.
- `file_parity`: max |ONNX - PyTorch| of every output, per file, at shape combinations the export never saw.
- `greedy_tokens`: a plain greedy loop over the exported encoder / decoder / decoder-with-past files,
  to compare token ids with PyTorch's greedy `generate` (the full runtime is runtime.Translator).
- `runtime_parity`: the runtime's token ids against `generate`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from mtonnx.export.samples import PARITY_CASES, Case, SampleInputs
from mtonnx.export.wrappers import decoder_layers, logits, subgraphs
from mtonnx.foundation.side_by_side import per_core
from mtonnx.runtime import layout
from mtonnx.runtime.cache import KVCache
from mtonnx.runtime.output_rows import OutputRows
from mtonnx.runtime.sessions import make_session

CASES = PARITY_CASES


def session(path: str | Path) -> ort.InferenceSession:
    """A one-thread CPU session without spinning (the runtime's defaults)."""
    return make_session(path)


def session_io(sess: ort.InferenceSession) -> dict[str, list[dict[str, Any]]]:
    """What ONNX Runtime reports for a session's inputs and outputs, in the manifest's format."""

    def describe(args):
        return [{"name": a.name, "dtype": _ort_dtype(a.type), "shape": list(a.shape)} for a in args]

    return {"inputs": describe(sess.get_inputs()), "outputs": describe(sess.get_outputs())}


def _ort_dtype(ort_type: str) -> str:
    name = ort_type.removeprefix("tensor(").removesuffix(")")
    return {"float": "float32", "double": "float64", "float16": "float16"}.get(name, name)


def check_files(export_dir: str | Path) -> list[dict[str, Any]]:
    """Per file: checker and shape inference pass, and whether the ORT session's I/O equals the manifest."""
    export_dir = Path(export_dir)
    manifest = json.loads((export_dir / layout.EXPORT_MANIFEST).read_text())
    rows = []
    for name, entry in manifest["files"].items():
        path = export_dir / name
        onnx.checker.check_model(str(path), full_check=True)
        inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path)), strict_mode=True)
        io = session_io(session(path))
        rows.append(
            {
                "file": name,
                "checker": "ok",
                "shape inference": f"ok ({len(inferred.graph.value_info)} intermediate shapes)",
                "inputs": len(io["inputs"]),
                "outputs": len(io["outputs"]),
                "session I/O == manifest": io == {k: entry[k] for k in ("inputs", "outputs")},
                "size_mb": round(path.stat().st_size / 2**20, 2),
            }
        )
    return rows


class _Expected:
    """A case's sample inputs and PyTorch's outputs of every subgraph on them."""

    def __init__(self, model, case: Case, seed: int = 0):
        from transformers.cache_utils import EncoderDecoderCache

        self.inputs = x = SampleInputs(model, case, seed)
        decoder = model.get_decoder()
        kinds = layout.by_kind(x.past)
        cache = EncoderDecoderCache.from_legacy_cache(tuple(zip(*(kinds[kind] for kind in layout.KV))))
        with torch.no_grad():
            first = decoder(
                input_ids=x.decoder_input_ids,
                encoder_hidden_states=x.hidden,
                encoder_attention_mask=x.attention_mask,
                use_cache=True,
            )
            self.first = (logits(model, first.last_hidden_state), *_flat(first.past_key_values))
            step = decoder(
                input_ids=x.next_token,
                encoder_hidden_states=x.hidden,
                encoder_attention_mask=x.attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            self.step = (logits(model, step.last_hidden_state), *_flat(step.past_key_values, self_only=True))
            self.full = model(
                input_ids=x.input_ids,
                attention_mask=x.attention_mask,
                decoder_input_ids=x.decoder_input_ids,
                use_cache=False,
            ).logits

    def feeds_and_expected(self, file: str, layers: int) -> tuple[dict[str, np.ndarray], list[torch.Tensor]]:
        x = self.inputs
        ids, mask = x.input_ids.numpy(), x.attention_mask.numpy()
        if file == layout.ENCODER:
            return {"input_ids": ids, "attention_mask": mask}, [x.hidden]
        if file == layout.DECODER:
            return (
                {
                    "input_ids": x.decoder_input_ids.numpy(),
                    "encoder_hidden_states": x.hidden.numpy(),
                    "encoder_attention_mask": mask,
                },
                list(self.first),
            )
        if file == layout.DECODER_WITH_PAST:
            feeds = {"input_ids": x.next_token.numpy(), "encoder_attention_mask": mask}
            feeds.update({n: t.numpy() for n, t in zip(layout.past_names(layers), x.past)})
            return feeds, list(self.step)
        if file == layout.TRANSLATION_STEP:
            return (
                {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": x.decoder_input_ids.numpy()},
                [self.full],
            )
        raise ValueError(f"no parity inputs for {file}")


def _flat(cache, self_only: bool = False) -> list[torch.Tensor]:
    return [t for layer in cache.to_legacy_cache() for t in (layer[:2] if self_only else layer)]


def file_parity(
    model,
    export_dir: str | Path,
    tolerance: float = 1e-4,
    cases: tuple[Case, ...] = CASES,
    files: list[str] | None = None,
) -> dict[str, Any]:
    """Max absolute difference of every output vs PyTorch, per file and case, and that difference relative to the
    output's scale (its largest magnitude, at least 1: float32 rounding grows with the values, and the tiny random
    models of some families carry caches of magnitude 70); pass when every scaled difference <= tolerance. A variant
    whose logits keep only some rows (output_rows.json) is compared on those rows."""
    export_dir = Path(export_dir)
    files = files or sorted(p.name for p in export_dir.glob("*.onnx"))
    rows = OutputRows.from_dir(export_dir)
    layers = decoder_layers(model)
    inputs = {case.name: _Expected(model, case) for case in cases}
    result: dict[str, Any] = {"tolerance": tolerance, "files": {}}
    outputs = {spec.file: spec.outputs for spec in subgraphs(layers)}
    for file in files:
        sess = session(export_dir / file)
        per_case = {}
        for case in cases:
            feeds, expected = inputs[case.name].feeds_and_expected(file, layers)
            got = sess.run(outputs[file], feeds)  # by name: optimum's files order their outputs differently
            expected = [_kept(e, rows) if name == "logits" else e for name, e in zip(outputs[file], expected)]
            diffs = [float(np.abs(g - e.numpy()).max()) for g, e in zip(got, expected)]
            scaled = [d / max(1.0, float(e.abs().max())) for d, e in zip(diffs, expected)]
            worst = int(np.argmax(diffs))
            per_case[case.name] = {
                "max_abs_diff": diffs[worst],
                "max_scaled_diff": max(scaled),
                "worst_output": outputs[file][worst],
                "outputs": len(got),
                "pass": max(scaled) <= tolerance,
            }
        result["files"][file] = {
            "cases": per_case,
            "max_abs_diff": max(c["max_abs_diff"] for c in per_case.values()),
            "max_scaled_diff": max(c["max_scaled_diff"] for c in per_case.values()),
            "pass": all(c["pass"] for c in per_case.values()),
        }
    result["pass"] = all(f["pass"] for f in result["files"].values())
    return result


def logits_ratio(model, export_dir: str | Path) -> float:
    """How many times PyTorch's logits the export's first decoder step computes (least squares, on the first parity
    case): 1 for a faithful export."""
    expected = _Expected(model, CASES[0])
    feeds, outputs = expected.feeds_and_expected(layout.DECODER, decoder_layers(model))
    got = session(Path(export_dir) / layout.DECODER).run(["logits"], feeds)[0]
    want = _kept(outputs[0], OutputRows.from_dir(export_dir)).numpy()
    return float((got * want).sum() / (want * want).sum())


def _kept(logits: torch.Tensor, rows: OutputRows | None) -> torch.Tensor:
    """PyTorch's logits at the columns a restricted variant keeps (all of them without a restriction)."""
    return logits if rows is None else logits[..., torch.from_numpy(rows.ids)]


def parity_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The parity result as table rows (file, case, max diff, worst output, pass)."""
    return [
        {
            "file": file,
            "case": case,
            "max_abs_diff": c["max_abs_diff"],
            "max_scaled_diff": c["max_scaled_diff"],
            "worst output": c["worst_output"],
            "pass": c["pass"],
        }
        for file, entry in result["files"].items()
        for case, c in entry["cases"].items()
    ]


def greedy_tokens(
    export_dir: str | Path,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    *,
    decoder_start: int,
    eos: int,
    pad: int,
    banned: list[int],
    max_new_tokens: int,
    layers: int,
    forced_bos: int | None = None,
    forced_eos: bool = True,
) -> list[list[int]]:
    """Greedy decoding over the exported files with HF generate's rules: bad words banned, the forced first token
    (M2M100/NLLB's target language) first, eos forced last when the model forces it.

    Deliberately plain (one batch, numpy): it checks the files; runtime.Translator is the real decoder.
    """
    export_dir = Path(export_dir)
    encoder, first, with_past = (session(export_dir / f) for f in layout.VARIANT_FILES)
    hidden = encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]
    batch = input_ids.shape[0]
    token = np.full((batch, 1), decoder_start, dtype=np.int64)
    logits, *present = first.run(
        ["logits", *layout.present_names(layers)],
        {"input_ids": token, "encoder_hidden_states": hidden, "encoder_attention_mask": attention_mask},
    )
    cache = KVCache.from_present(present)  # the cross K/V: computed once, reused every step
    done = np.zeros(batch, dtype=bool)
    generated: list[np.ndarray] = []
    for step in range(max_new_tokens):
        scores = logits[:, -1, :].copy()
        scores[:, banned] = -np.inf  # bad_words_ids: Marian bans pad
        forced = eos if forced_eos and step == max_new_tokens - 1 else forced_bos if step == 0 else None
        if forced is not None:  # forced_eos_token_id: the last allowed token is eos; forced_bos_token_id: the first
            scores[:, :] = -np.inf
            scores[:, forced] = 0.0
        token = np.where(done, pad, scores.argmax(-1)).astype(np.int64)
        generated.append(token)
        done |= token == eos
        if done.all():
            break
        feeds = {
            "input_ids": token[:, None],
            "encoder_attention_mask": attention_mask,
            **dict(zip(layout.past_names(layers), cache.tensors())),
        }
        logits, *present_self = with_past.run(["logits", *layout.present_names(layers, layout.SELF)], feeds)
        cache.update_self(present_self)
    rows = np.stack(generated, axis=1).tolist()
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def greedy_match(
    export_dir: str | Path,
    tokenizer,
    sources: list[str],
    expected: list[list[int]],
    *,
    generation_config,
    max_new_tokens: int,
    batch_size: int,
    layers: int,
    source_prefix: str = "",
) -> dict[str, Any]:
    """Fraction of sentences whose greedy token ids over the export equal `expected` (PyTorch's)."""
    from mtonnx.sources.reference import batch

    got: list[list[int]] = []
    for i in range(0, len(sources), batch_size):
        enc = batch(tokenizer, sources[i : i + batch_size], source_prefix)
        got += greedy_tokens(
            export_dir,
            enc.input_ids.numpy(),
            enc.attention_mask.numpy(),
            decoder_start=generation_config.decoder_start_token_id,
            eos=generation_config.eos_token_id,
            pad=generation_config.pad_token_id,
            banned=[w[0] for w in generation_config.bad_words_ids or [] if len(w) == 1],
            max_new_tokens=max_new_tokens,
            layers=layers,
            forced_bos=generation_config.forced_bos_token_id,
            forced_eos=generation_config.forced_eos_token_id is not None,
        )
    return {**token_match(got, expected), "token_ids": got}


def token_match(got: list[list[int]], expected: list[list[int]]) -> dict[str, Any]:
    """Fraction of sentences with identical token ids, and the first mismatches."""
    if len(got) != len(expected):
        raise ValueError(f"{len(got)} outputs for {len(expected)} expected")
    mismatches = [{"index": i, "expected": e, "got": g} for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    return {
        "match": 1 - len(mismatches) / max(len(expected), 1),
        "sentences": len(expected),
        "mismatches": mismatches[:5],
    }


def runtime_parity(translator, model, tokenizer, sources: list[str], **decoding) -> dict[str, Any]:
    """The runtime's token ids vs PyTorch `generate` on the same padded batches and settings (`decoding`: the
    keyword arguments of `runtime_ids`)."""
    from mtonnx.sources.reference import translate_generate

    expected = translate_generate(model, tokenizer, sources, progress=False, **decoding)["token_ids"]
    return token_match(runtime_ids(translator, tokenizer, sources, **decoding), expected)


def finite_outputs(variant_dir: str | Path, sources: list[str]) -> bool:
    """True when the variant's encoder output and first-step logits have no NaN or inf (the fp16 overflow)."""
    from mtonnx.runtime import Translator

    translator = Translator(variant_dir, decoder="split")
    ids, mask = translator.tokenizer.batch(sources)
    run = translator.decoder.begin(ids, mask)
    if translator.shortlist is not None:  # its decoders take the batch's lm_head columns as inputs
        run.feed_columns(translator.shortlist.feeds(translator.shortlist.rows(ids, mask)))
    logits = run.step(np.full(len(sources), translator.settings.decoder_start_token_id))
    return bool(np.isfinite(run.hidden).all() and np.isfinite(logits).all())


def runtime_ids(
    translator,
    tokenizer,
    sources: list[str],
    *,
    num_beams: int,
    batch_size: int,
    max_new_tokens: int,
    source_prefix: str = "",
) -> list[list[int]]:
    """The runtime's token ids on the padded batches `generate` sees (MarianTokenizer, padding=True), in order."""
    batches = generate_batches(tokenizer, sources, batch_size, source_prefix)
    return generate_ids(translator, batches, num_beams=num_beams, max_new_tokens=max_new_tokens)


def generate_batches(tokenizer, sources: list[str], batch_size: int, source_prefix: str = "") -> list[tuple]:
    """(input_ids, attention_mask) as numpy arrays: the padded batches of `batch_size` that `generate` sees."""
    from mtonnx.sources.reference import batch

    encoded = [batch(tokenizer, sources[i : i + batch_size], source_prefix) for i in range(0, len(sources), batch_size)]
    return [(enc.input_ids.numpy(), enc.attention_mask.numpy()) for enc in encoded]


def generate_ids(translator, batches: list[tuple], *, num_beams: int, max_new_tokens: int) -> list[list[int]]:
    """The runtime's token ids on `batches` (generate_batches), in order."""
    got: list[list[int]] = []
    for ids, mask in batches:
        got += translator.generate(ids, mask, num_beams=num_beams, max_new_tokens=max_new_tokens)
    return got


def layout_parity(
    translators: dict[str, Any],
    model,
    tokenizer,
    baseline: dict[str, Any],
    *,
    num_beams: int,
    batch_size: int,
    max_new_tokens: int,
    batch1_sentences: int,
    source_prefix: str = "",
) -> list[dict[str, Any]]:
    """Token-identical with `generate`, per runtime layout, greedy and beam: at the baseline's batch size on every
    sentence against baseline.json (the same batches notebook 01 ran, so PyTorch need not run again), and at
    batch 1 on the first `batch1_sentences` against PyTorch at batch 1 (computed once, shared by the layouts). The
    layouts run side by side, one per core (each translator on its own thread: the tokens do not depend on it)."""
    from mtonnx.sources.reference import translate_generate

    sources = [item["en"] for item in baseline["items"]]
    rows = []
    for search, beams in (("greedy", 1), ("beam", num_beams)):
        expected = {
            batch_size: [item[f"{search}_ids"] for item in baseline["items"]],
            1: translate_generate(
                model,
                tokenizer,
                sources[:batch1_sentences],
                num_beams=beams,
                max_new_tokens=max_new_tokens,
                batch_size=1,
                source_prefix=source_prefix,
                progress=False,
            )["token_ids"],
        }

        # tokenized here, once per batch size: a transformers tokenizer is not safe to call from several threads
        batches = {
            size: generate_batches(tokenizer, sources[: len(want)], size, source_prefix)
            for size, want in expected.items()
        }

        def check(name: str, expected=expected, batches=batches, beams=beams, search=search) -> list[dict]:
            out = []
            for size, want in expected.items():
                got = generate_ids(translators[name], batches[size], num_beams=beams, max_new_tokens=max_new_tokens)
                result = token_match(got, want)
                out.append(
                    {
                        "export": name,
                        "search": search,
                        "batch": size,
                        "token-identical": result["match"],
                        "sentences": result["sentences"],
                    }
                )
            return out

        for part in per_core(check, translators):  # a layout per core
            rows += part
    return rows
