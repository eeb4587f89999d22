"""What one batch of the service runs: the runtime's `Translator`, on sentences grouped by length.

Decoding continues until the longest row of a batch finishes, so one very long sentence among short ones makes
every short row pay for its steps; the batch is split where lengths jump (each group one model call, padded to
its own longest). Translations are the Translator's own: it sorts and pads inside `translate`, and padding
changes no token (tests/test_runtime.py and tests/test_serve.py check both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

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

    translator: Any  # mtonnx.runtime.Translator, or a stand-in with its translate() and settings
    source_prefix: str = ""

    @property
    def defaults(self) -> Options:
        """The model's generation defaults (generation_config.json), as Options."""
        s = self.translator.settings
        return Options(s.num_beams, s.max_length - 1)

    def __call__(self, texts: list[str], options: Options) -> list[str]:
        """Translate one batch; each length group is one Translator.translate call."""
        out: list[str] = [""] * len(texts)
        for group in length_groups(texts):
            translated = self.translator.translate(
                [texts[i] for i in group],
                batch_size=len(group),
                source_prefix=self.source_prefix,
                num_beams=options.num_beams,
                max_new_tokens=options.max_new_tokens,
            )
            for i, text in zip(group, translated):
                out[i] = text
        return out
