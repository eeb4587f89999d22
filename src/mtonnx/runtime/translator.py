"""`Translator`: load an export directory and translate English to Chinese with ONNX Runtime only.

Accepts the hand export (mtonnx.export.manual), optimum's split files, optimum's merged decoder, or a tuned variant's
in-place, tuned or lean files (mtonnx.variants.tuned; preferred when present): the layouts of `runtime.layout`.
Generation defaults come from the directory's generation_config.json, as with `generate`. A restricted variant
(layout.OUTPUT_ROWS) decodes over its logits columns and returns vocab.json ids (runtime.output_rows); a
shortlisted one (layout.SHORTLIST) over the columns each batch's shortlist keeps (runtime.shortlist).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from mtonnx.runtime import decoding, families, heap, integrity, layout, layouts, segments, textio
from mtonnx.runtime.decoding import GenerationSettings
from mtonnx.runtime.output_rows import OutputRows
from mtonnx.runtime.sessions import SessionSettings, make_session
from mtonnx.runtime.shortlist import Shortlist
from mtonnx.runtime.tokenizer import load_tokenizer, pad

MAX_BATCH = 256  # sentences per model call at most: memory grows with it (a batch of 1000 held GBs)
MAX_BEAMS = 64
PREFIX_ROOM = 8  # positions a source prefix must leave for the sentence (a piece of `fit` is at least one word)
# Every one of at least this many sentences translated to empty text is a model that answers nothing; one empty
# answer alone may be the model's translation of that sentence (a symbol, a name).
EMPTY_ANSWER_PIECES = 2


class ModelDirError(RuntimeError):
    """A directory the runtime cannot translate with; str() names the file and what to do."""


class EmptyTranslationError(ModelDirError):
    """Every sentence of an input of at least EMPTY_ANSWER_PIECES sentences translated to empty text: a model that
    answers nothing is broken (damaged weights, an untrained export), and must never pass as a translation."""


class Translator:
    """Translate with an exported model directory; one session per file, shared across calls and threads.

    `wrap(file, session)` may replace each session by an object with the same `run` (calibration records the
    feeds that way; the in-place layout also calls `io_binding` and `run_with_iobinding`); `sessions` maps each
    loaded file to what the decoder runs. Any file that cannot be read or loaded is a ModelDirError naming it,
    never a library's traceback. `verify` checks every file against the directory's SHA256SUMS before anything
    loads (runtime.integrity; None: unless MTONNX_VERIFY=0); a directory without the list loads unverified.
    """

    def __init__(
        self,
        model_dir: str | Path,
        decoder: str = "auto",
        session: SessionSettings = SessionSettings(),
        wrap: Callable[[str, ort.InferenceSession], Any] | None = None,
        verify: bool | None = None,
    ):
        self.dir = Path(model_dir)
        self.verified = verify_dir(self.dir, verify)  # the files checked; None: not verified
        self.layout = check_dir(self.dir, decoder)
        self.tokenizer = _read(self.dir, "the tokenizer files", lambda: load_tokenizer(self.dir))
        self.settings = _read(self.dir, "generation_config.json", lambda: GenerationSettings.from_dir(self.dir))
        self.max_positions = _read(self.dir, "config.json", lambda: max_positions(self.dir))
        self.source_prefix = deployed_prefix(self.dir)  # what a deploy/ directory's run put in front of a source
        self.output_rows = self._output_rows()
        self.shortlist = self._shortlist()
        spec = layouts.BY_NAME[self.layout]
        head = [layout.SEARCH_HEAD] if spec.search_head and (self.dir / layout.SEARCH_HEAD).is_file() else []
        loaded = {f: self._session(f, session) for f in [*spec.files, *head]}
        self._check_vocab(loaded[spec.files[-1]])
        self.sessions = {f: wrap(f, s) for f, s in loaded.items()} if wrap else loaded
        heap.hold()  # decoding steps reuse the heap instead of faulting it in again (runtime.heap)
        self.decoder = spec.decoder(self.sessions)

    def _session(self, file: str, settings: SessionSettings) -> ort.InferenceSession:
        try:
            return make_session(self.dir / file, settings)
        except Exception as err:  # ORT's own load failure (truncated file, missing external data, ...)
            reason = " ".join(str(err).split())[:200]
            external = layout.WEIGHTS in str(err) or "external" in str(err).lower()
            fix = (
                f"copy the whole directory: {layout.WEIGHTS} holds the weights of its .onnx files"
                if external
                else "re-export it (mtonnx run, or mtonnx.export.manual.export_manual) or copy it again"
            )
            raise ModelDirError(f"{self.dir / file} cannot be loaded by ONNX Runtime ({reason}); {fix}") from None

    def _output_rows(self) -> OutputRows | None:
        """The directory's logits restriction (None: the whole vocabulary), checked against the generation ids."""
        try:
            rows = OutputRows.from_dir(self.dir)
            if rows is not None:
                rows.settings(self.settings)
            return rows
        except (OSError, ValueError, TypeError) as err:
            raise ModelDirError(
                f"{self.dir / layout.OUTPUT_ROWS} is not a usable restriction ({' '.join(str(err).split())[:160]}); "
                "rebuild the restricted variant (mtonnx.variants.restricted)"
            ) from None

    def _shortlist(self) -> Shortlist | None:
        """The directory's shortlist (None: none), checked against the generation ids and the other restriction."""
        try:
            shortlist = Shortlist.from_dir(self.dir)
            if shortlist is not None:
                if self.output_rows is not None:
                    raise ValueError(f"the directory also has {layout.OUTPUT_ROWS}: shortlist a full variant")
                if not layouts.BY_NAME[self.layout].shortlist:
                    raise ValueError(f"a shortlist needs a variant's decoder files, not the {self.layout} layout")
                OutputRows(shortlist.always.tolist()).settings(self.settings)
            return shortlist
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ModelDirError(
                f"{self.dir / layout.SHORTLIST} is not a usable shortlist ({' '.join(str(err).split())[:160]}); "
                "rebuild the shortlisted variant (mtonnx.variants.shortlist)"
            ) from None

    def _check_vocab(self, session) -> None:
        logits = next(o for o in session.get_outputs() if o.name == "logits")
        size = logits.shape[-1]
        if self.shortlist is not None:
            inputs = {i.name for i in session.get_inputs()}
            if self.shortlist.vocab != self.tokenizer.vocab_size or not inputs.issuperset(layout.HEAD_COLUMN_INPUTS):
                raise ModelDirError(
                    f"{self.dir}: {layout.HEAD_COLUMNS} has {self.shortlist.vocab} lm_head columns for a "
                    f"{self.tokenizer.vocab_size}-entry vocab.json, or the decoder takes no lm_head columns: rebuild "
                    "the shortlisted variant (mtonnx.variants.shortlist)"
                )
        elif self.output_rows is not None:
            if size != len(self.output_rows) or self.output_rows.ids[-1] >= self.tokenizer.vocab_size:
                raise ModelDirError(
                    f"{self.dir}: {layout.OUTPUT_ROWS} lists {len(self.output_rows)} vocabulary rows (of "
                    f"{self.tokenizer.vocab_size}) but the model's logits have {size}: rebuild the restricted variant "
                    "(mtonnx.variants.restricted)"
                )
        elif isinstance(size, int) and size < self.tokenizer.vocab_size and self._restricted():
            raise ModelDirError(
                f"{self.dir}: a restricted variant (its logits have {size} columns for a "
                f"{self.tokenizer.vocab_size}-entry vocab.json) whose {layout.OUTPUT_ROWS}, the vocabulary row of each "
                "column, is missing: copy it back from the variant"
            )
        elif isinstance(size, int) and size != self.tokenizer.vocab_size and not self._padded_vocab(size):
            raise ModelDirError(
                f"{self.dir}: vocab.json has {self.tokenizer.vocab_size} entries but the model's logits have {size}: "
                "the tokenizer files and the ONNX files come from different models"
            )

    def _restricted(self) -> bool:
        """Whether the directory's variant manifest says its lm_head was cut to fewer output rows."""
        manifest = _read(
            self.dir, layout.VARIANT_MANIFEST, lambda: families.read_json(self.dir / layout.VARIANT_MANIFEST)
        )
        return (manifest.get("recipe") or {}).get("output_rows") is not None

    def _padded_vocab(self, size: int) -> bool:
        """Logits wider than the tokenizer's ids because the model padded its embedding to a round size, as config.json
        says (M2M100's and NLLB's 8 spare rows, T5's multiple of 128)."""
        config = families.read_json(self.dir / "config.json")
        return config.get("vocab_size") == size > self.tokenizer.vocab_size

    def generate(self, input_ids: np.ndarray, attention_mask: np.ndarray, **options) -> list[list[int]]:
        """Token ids per row (up to and including eos); options as generate(): num_beams, max_new_tokens, ...
        The heap is handed back after the call (runtime.heap)."""
        try:
            return self._generate(input_ids, attention_mask, **options)
        finally:
            heap.release()

    def _generate(self, input_ids: np.ndarray, attention_mask: np.ndarray, **options) -> list[list[int]]:
        settings = self.settings.with_options(**options)
        run = self.decoder.begin(input_ids, attention_mask, settings.num_beams, settings.group_encoder)
        rows = self.output_rows
        if self.shortlist is not None:
            rows = self.shortlist.rows(input_ids, attention_mask)
            run.feed_columns(self.shortlist.feeds(rows))
        if rows is None:
            return decoding.generate(run, input_ids.shape[0], settings)
        return rows.vocabulary_ids(decoding.generate(rows.run(run), input_ids.shape[0], rows.settings(settings)))

    def generate_sorted(
        self, encoded: list[list[int]], batch_size: int = 8, progress=None, **options
    ) -> list[list[int]]:
        """Generated ids of each encoded row, in the rows' order, decoded in batches of `batch_size` rows of similar
        length (sorted by token count: less padding); `progress` is called with each batch's size. The heap is
        handed back once, after the last batch: between batches it is reused (runtime.heap)."""
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        out: list[list[int]] = [[] for _ in encoded]
        try:
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                ids, mask = pad([encoded[i] for i in chunk], self.tokenizer.pad_token_id)
                for i, generated in zip(chunk, self._generate(ids, mask, **options)):
                    out[i] = generated
                if progress:
                    progress(len(chunk))
        finally:
            heap.release()
        return out

    def validate(
        self,
        batch_size: int = 8,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        source_prefix: str | None = None,
    ) -> None:
        """ValueError (one line) for options this model cannot run (check_options, check_prefix)."""
        check_options(self.max_positions, batch_size, num_beams, max_new_tokens)
        self.check_prefix(self.source_prefix if source_prefix is None else source_prefix)

    def fit(self, text: str, source_prefix: str = "") -> list[str]:
        """`text` as pieces that each fit the model's positions: itself when it fits, else cut at clause
        punctuation, then at spaces, then between sentencepiece pieces, packed greedily."""
        limit = self.max_positions

        def fits(candidate: str) -> bool:
            return len(self.tokenizer.encode(f"{source_prefix} {candidate}".strip())) <= limit

        if fits(text):
            return [text]
        pieces: list[str] = []
        for clause in re.split(r"(?<=[,;:])\s+", text):
            for unit in [clause] if fits(clause) else self._words(clause, fits):
                if pieces and fits(f"{pieces[-1]} {unit}"):
                    pieces[-1] = f"{pieces[-1]} {unit}"
                else:
                    pieces.append(unit)
        return pieces

    def _words(self, clause: str, fits: Callable[[str], bool]) -> list[str]:
        """A clause too long for the model as words, and a word too long as runs of sentencepiece pieces."""
        units = []
        for word in clause.split():
            if fits(word):
                units.append(word)
                continue
            spm_pieces = self.tokenizer.source.encode(word, out_type=str)
            step = max(1, self.max_positions // 2)
            units += [
                self.tokenizer.source.decode_pieces(spm_pieces[i : i + step]) for i in range(0, len(spm_pieces), step)
            ]
        return units

    def check_prefix(self, source_prefix: str) -> None:
        """ValueError (one line) when `source_prefix` leaves a sentence no room in the model's positions: every piece
        a long sentence is cut into carries it, so a prefix that fills the positions would fail inside ONNX Runtime."""
        if not source_prefix:
            return
        used = len(self.tokenizer.encode(source_prefix))  # with eos, as every encoded sentence has it
        if used + PREFIX_ROOM > self.max_positions:
            raise ValueError(
                f"the source prefix is {used} tokens and the model has {self.max_positions} positions: a prefix must "
                f"leave {PREFIX_ROOM} of them to the sentence, so it can have at most "
                f"{self.max_positions - PREFIX_ROOM} tokens"
            )

    def translate(
        self,
        texts: str | Iterable[str],
        batch_size: int = 8,
        source_prefix: str | None = None,
        progress=None,
        on_cut: Callable[[segments.Cut], None] | None = None,
        **options,
    ) -> str | list[str]:
        """Translate texts (a str in, a str out; a list in, a list of as many out, in order) by the one rule of
        runtime.segments: each text's lines sentence by sentence, joined back line for line. A sentence longer than
        the model's positions is translated in pieces (`fit`) and reported to `on_cut` (default: a warning naming
        the text and line). `progress(done, total)` is called with the pieces done after each batch and their total.
        `source_prefix` None: the one the directory's run deployed with (deploy.json), else none."""
        source_prefix = self.source_prefix if source_prefix is None else source_prefix
        if isinstance(texts, str):
            return self.translate([texts], batch_size, source_prefix, progress, on_cut, **options)[0]
        if isinstance(texts, (bytes, bytearray)):
            raise TypeError("texts is bytes, not str: decode it first (e.g. data.decode('utf-8'))")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
            if surrogate := textio.lone_surrogate(text):
                raise ValueError(f"texts[{i}] holds a lone surrogate ({surrogate}): it is not Unicode text")
        self.validate(batch_size, options.get("num_beams"), options.get("max_new_tokens"), source_prefix)
        segmented = segments.segment(texts, fit=lambda sentence: self.fit(sentence, source_prefix))
        for cut in segmented.cuts:
            if on_cut is not None:
                on_cut(cut)
            else:
                warnings.warn(
                    f"text {cut.text}, line {cut.line}: a sentence longer than the model's {self.max_positions} "
                    f"positions was translated in {cut.pieces} pieces cut at clause or word boundaries",
                    stacklevel=2,
                )
        total = len(segmented.pieces)
        counted = (lambda done: progress(done, total)) if progress else None
        return segmented.join(self.translate_pieces(segmented.pieces, batch_size, source_prefix, counted, **options))

    def translate_pieces(
        self, pieces: list[str], batch_size: int = 8, source_prefix: str | None = None, progress=None, **options
    ) -> list[str]:
        """Translate pieces that are already segmented (runtime.segments: one sentence, or a cut part of one, each
        fitting the model's positions) in length-sorted batches; one translation per piece, in order. `progress` is
        called with each batch's size. EmptyTranslationError when every one of at least EMPTY_ANSWER_PIECES non-blank
        pieces comes back empty."""
        source_prefix = self.source_prefix if source_prefix is None else source_prefix
        encoded = [self.tokenizer.encode(f"{source_prefix} {t}".strip()) for t in pieces]
        out = [self.tokenizer.decode(ids) for ids in self.generate_sorted(encoded, batch_size, progress, **options)]
        if sum(1 for p in pieces if p.strip()) >= EMPTY_ANSWER_PIECES and not any(t.strip() for t in out):
            raise EmptyTranslationError(
                f"{self.dir}: the model translated all {len(pieces)} sentences to empty text: its files are damaged "
                "or it is not a trained model; re-copy the directory or re-export it"
            )
        return out


def model_dir_of(model_dir: str | Path | None, run: str | Path | None) -> Path:
    """The directory to load: `model_dir`, or the deploy/ directory of the run directory `run` (ModelDirError, one
    line saying how to write it, when the run has none)."""
    if model_dir is not None:
        return Path(model_dir)
    deploy = Path(run) / layout.DEPLOY
    if not Path(run).is_dir():
        raise ModelDirError(f"--run {run}: no such run directory (mtonnx run --params ... writes outputs/<name>)")
    if not deploy.is_dir():
        raise ModelDirError(
            f"--run {run}: the run has no {layout.DEPLOY}/ directory; the quantization notebook writes it "
            f"(mtonnx run --params PARAMS --out {run} --only 06)"
        )
    return deploy


def deployed_prefix(directory: str | Path) -> str:
    """The source prefix the run that wrote a deploy/ directory used (its deploy.json), "" for any other directory:
    a deployment translates as the run measured it without being told again."""
    path = Path(directory) / layout.DEPLOY_FACTS
    try:
        prefix = json.loads(path.read_text(encoding="utf-8")).get("source_prefix", "") if path.is_file() else ""
    except (OSError, ValueError, AttributeError):
        raise ModelDirError(f"{path} is not readable JSON: copy the run's deploy/ directory again") from None
    return prefix if isinstance(prefix, str) else ""


def verify_dir(directory: str | Path, verify: bool | None = None) -> int | None:
    """runtime.integrity.verify unless turned off (`verify` False, or None and MTONNX_VERIFY=0), its failure as a
    ModelDirError: the files checked, None when not verified (turned off, or a directory without SHA256SUMS)."""
    if not integrity.enabled(verify):
        return None
    try:
        return integrity.verify(directory)
    except integrity.IntegrityError as err:
        raise ModelDirError(str(err)) from None


def check_dir(directory: Path, decoder: str = "auto") -> str:
    """The checks made before loading anything (a directory, its tokenizer files and config, a decoder layout's
    files), so a bad directory fails before any work; returns the layout `pick_layout` chooses."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelDirError(f"{directory} is not a directory")
    try:
        family, convention = families.convention_of_dir(directory)
    except ValueError as err:  # an unknown model_type or tokenizer_class, or a config.json that is not JSON
        raise ModelDirError(f"{directory}: {err}") from None
    missing = [f for f in convention.files if not (directory / f).is_file()]
    if not any((directory / f).is_file() for f in ("generation_config.json", "config.json")):
        missing.append("generation_config.json or config.json")
    if missing:
        raise ModelDirError(
            f"{directory} is missing {', '.join(missing)}: not an exported {family.label} model directory"
        )
    return pick_layout(directory, decoder)


def pick_layout(directory: Path, decoder: str = "auto") -> str:
    """The layout `decoder` names, or with "auto" the first of layouts.AUTO_ORDER whose files are all present."""
    if decoder not in ("auto", *layouts.BY_NAME):
        raise ModelDirError(f"decoder must be auto, {', '.join(layouts.BY_NAME)}; got {decoder!r}")
    candidates = layouts.AUTO_ORDER if decoder == "auto" else [decoder]
    for name in candidates:
        if all((Path(directory) / f).is_file() for f in layouts.BY_NAME[name].files):
            return name
    wanted = " or ".join(" + ".join(layouts.BY_NAME[c].files) for c in candidates)
    raise ModelDirError(f"{directory} has no {wanted}")


def max_positions(directory: Path) -> int:
    """The model's positions: config.json's key for them (the family's: max_position_embeddings, T5's n_positions),
    else tokenizer_config.json's model_max_length, else 512. A file that is not a JSON object, or a value that is not
    a whole number of at least 2, is a ModelDirError naming the file and the key."""
    positions = families.of_dir(directory).positions_key
    for name, key in (("config.json", positions), ("tokenizer_config.json", "model_max_length")):
        path = Path(directory) / name
        if not path.is_file():
            continue
        try:
            config = families.read_json(path)
        except (OSError, ValueError) as err:
            raise ModelDirError(f"{path.parent}/{err}") from None
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ModelDirError(f"{path}: {key} is {value!r}, not a whole number of positions (at least 2)")
        return value
    return 512


def check_options(
    positions: int, batch_size: int = 8, num_beams: int | None = None, max_new_tokens: int | None = None
) -> None:
    """ValueError (one line) for options a model of `positions` cannot run: batch 1..MAX_BATCH, beams
    1..MAX_BEAMS, 1 <= max_new_tokens < positions (decoding past them would fail inside ONNX Runtime)."""
    _check_int("batch_size", batch_size, 1, MAX_BATCH)
    if num_beams is not None:
        _check_int("num_beams", num_beams, 1, MAX_BEAMS)
    if max_new_tokens is not None:
        _check_int("max_new_tokens", max_new_tokens, 1, positions - 1, f" (the model has {positions} positions)")


def _check_int(name: str, value: Any, lo: int, hi: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer from {lo} to {hi}{why}, got {value!r}")


def _read(directory: Path, what: str, load: Callable[[], Any]) -> Any:
    """`load()`, with any failure to read or parse the model's files as one ModelDirError naming them."""
    try:
        return load()
    except ModelDirError:
        raise
    except Exception as err:  # json, sentencepiece or a missing entry: the directory is broken, say which part
        reason = f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"
        raise ModelDirError(
            f"{directory}: {what} cannot be read ({reason}); copy the tokenizer and config files "
            "from the exported model directory again"
        ) from None
