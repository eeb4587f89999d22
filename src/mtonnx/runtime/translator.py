"""`Translator`: load an export directory and translate English to Chinese with ONNX Runtime only.

Accepts the hand export (notebook 02), optimum's split files, optimum's merged decoder, or a tuned variant's
tuned or lean files (mtonnx.variants.tuned; preferred when present): the layouts of `runtime.layout`.
Generation defaults come from the directory's generation_config.json, as with `generate`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from mtonnx.runtime import decoding, layout
from mtonnx.runtime.decoders import CachedDecoder, NoCacheDecoder
from mtonnx.runtime.decoding import GenerationSettings
from mtonnx.runtime.layout import LAYOUTS
from mtonnx.runtime.sessions import SessionSettings, make_session
from mtonnx.runtime.tokenizer import MarianSpmTokenizer, pad


class ModelDirError(RuntimeError):
    """A directory the runtime cannot translate with; str() names what is missing or mismatched."""


class Translator:
    """Translate with an exported model directory; one session per file, shared across calls and threads.

    `wrap(file, session)` may replace each session by an object with the same `run` (calibration records the
    feeds that way); `sessions` maps each loaded file to what the decoder runs.
    """

    def __init__(
        self,
        model_dir: str | Path,
        decoder: str = "auto",
        session: SessionSettings = SessionSettings(),
        wrap: Callable[[str, ort.InferenceSession], Any] | None = None,
    ):
        self.dir = Path(model_dir)
        if not self.dir.is_dir():
            raise ModelDirError(f"{self.dir} is not a directory")
        missing = [f for f in layout.TOKENIZER_FILES if not (self.dir / f).is_file()]
        if not any((self.dir / f).is_file() for f in ("generation_config.json", "config.json")):
            missing.append("generation_config.json or config.json")
        if missing:
            raise ModelDirError(f"{self.dir} is missing {', '.join(missing)}: not an exported Marian model directory")
        self.layout = self._layout(decoder)
        self.tokenizer = MarianSpmTokenizer(self.dir)
        self.settings = GenerationSettings.from_dir(self.dir)
        loaded = {f: make_session(self.dir / f, session) for f in LAYOUTS[self.layout]}
        self._check_vocab(loaded[LAYOUTS[self.layout][-1]])
        self.sessions = {f: wrap(f, s) for f, s in loaded.items()} if wrap else loaded
        self.decoder = self._decoder(self.sessions)

    def _decoder(self, s: dict) -> CachedDecoder | NoCacheDecoder:
        if self.layout == "no-cache":
            return NoCacheDecoder(s[layout.TRANSLATION_STEP])
        if self.layout in ("tuned", "lean"):
            return CachedDecoder(s[layout.ENCODER], None, s[LAYOUTS[self.layout][2]], cross_kv=s[layout.CROSS_KV])
        if self.layout == "merged":
            return CachedDecoder(s[layout.ENCODER], None, s[layout.DECODER_MERGED])
        return CachedDecoder(s[layout.ENCODER], s[layout.DECODER], s[layout.DECODER_WITH_PAST])

    def _layout(self, decoder: str) -> str:
        if decoder not in ("auto", *LAYOUTS):
            raise ModelDirError(f"decoder must be auto, {', '.join(LAYOUTS)}; got {decoder!r}")
        candidates = layout.AUTO_ORDER if decoder == "auto" else [decoder]
        for name in candidates:
            if all((self.dir / f).is_file() for f in LAYOUTS[name]):
                return name
        wanted = " or ".join(" + ".join(LAYOUTS[c]) for c in candidates)
        raise ModelDirError(f"{self.dir} has no {wanted}")

    def _check_vocab(self, session) -> None:
        logits = next(o for o in session.get_outputs() if o.name == "logits")
        size = logits.shape[-1]
        if isinstance(size, int) and size != self.tokenizer.vocab_size:
            raise ModelDirError(
                f"{self.dir}: vocab.json has {self.tokenizer.vocab_size} entries but the model's logits have {size}: "
                "the tokenizer files and the ONNX files come from different models"
            )

    def generate(self, input_ids: np.ndarray, attention_mask: np.ndarray, **options) -> list[list[int]]:
        """Token ids per row (up to and including eos); options as generate(): num_beams, max_new_tokens, ..."""
        settings = self.settings.with_options(**options)
        run = self.decoder.begin(input_ids, attention_mask, expand=settings.num_beams)
        return decoding.generate(run, input_ids.shape[0], settings)

    def translate(
        self, texts: Iterable[str], batch_size: int = 8, source_prefix: str = "", progress=None, **options
    ) -> list[str]:
        """Translate texts in length-sorted batches (less padding); output order = input order.

        `progress` is called with the number of texts done after each batch.
        """
        texts = list(texts)
        limit = self.tokenizer.model_max_length
        encoded = [self.tokenizer.encode(f"{source_prefix} {t}".strip()) for t in texts]
        for i, ids in enumerate(encoded):
            if len(ids) > limit:
                warnings.warn(
                    f"text {i} has {len(ids)} tokens; truncated to the model's maximum of {limit}", stacklevel=2
                )
                encoded[i] = ids[: limit - 1] + [self.tokenizer.eos_token_id]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        out: list[str] = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            ids, mask = pad([encoded[i] for i in chunk], self.tokenizer.pad_token_id)
            for i, generated in zip(chunk, self.generate(ids, mask, **options)):
                out[i] = self.tokenizer.decode(generated)
            if progress:
                progress(len(chunk))
        return out
