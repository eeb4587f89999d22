"""What the service translates and how one batch runs: runtime.segments' pieces, through the runtime's
`Translator.translate_pieces`, grouped by length.

A request's texts are segmented by the one rule every entry point uses (`segment`: lines kept, each line sentence by
sentence, a sentence too long for the model cut to fit with the service's source prefix), so the batcher queues and
batches sentences, and the answer joins them back per text exactly as `Translator.translate` does. Decoding continues
until the longest row of a batch finishes, so one very long sentence among short ones makes every short row pay for
its steps; the batch is split where lengths jump (each group one model call, padded to its own longest). Padding
changes no token (tests/test_runtime.py and tests/test_serve.py check it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from mtonnx.runtime import segments

GROUP_RATIO, GROUP_SLACK = 2.0, 40  # a new length group when a text is > 2x and > 40 chars longer than the first


class Options(NamedTuple):
    """Generation options a request may set; only sentences with equal options share a model call."""

    num_beams: int
    max_new_tokens: int


def length_groups(texts: list[str], ratio: float = GROUP_RATIO, slack: int = GROUP_SLACK) -> list[list[int]]:
    """Indices of texts, sorted by length and cut where a text is `ratio` times and `slack` chars longer."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    groups: list[list[int]] = []
    for i in order:
        first = len(texts[groups[-1][0]]) if groups else None
        if first is None or len(texts[i]) > max(first * ratio, first + slack):
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


@dataclass
class TranslatorEngine:
    """Callable the batcher runs: texts + Options -> translations, in the texts' order."""

    translator: Any  # mtonnx.runtime.Translator, or a stand-in with its settings, fit() and translate_pieces()
    source_prefix: str = ""

    @property
    def defaults(self) -> Options:
        """The model's generation defaults (generation_config.json), as Options."""
        s = self.translator.settings
        return Options(s.num_beams, s.max_length - 1)

    def segment(self, texts: list[str]) -> segments.Segments:
        """The texts as the pieces the model translates, by the CLI's rule; `.join` turns their translations back into
        one string per text."""
        return segments.segment(texts, fit=lambda sentence: self.translator.fit(sentence, self.source_prefix))

    def __call__(self, pieces: list[str], options: Options) -> list[str]:
        """Translate one batch of pieces; each length group is one Translator.translate_pieces call."""
        out: list[str] = [""] * len(pieces)
        for group in length_groups(pieces):
            translated = self.translator.translate_pieces(
                [pieces[i] for i in group],
                batch_size=len(group),
                source_prefix=self.source_prefix,
                num_beams=options.num_beams,
                max_new_tokens=options.max_new_tokens,
            )
            for i, text in zip(group, translated):
                out[i] = text
        return out
