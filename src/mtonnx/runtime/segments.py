"""The one rule every entry point splits text by and joins translations back with: the CLI, `Translator.translate`,
the service's /translate and `mtonnx batch`.

- A text's lines are split on "\\n" only (a trailing "\\r" is dropped) and joined back with "\\n": a text of
  three lines translates to three lines, a final newline included.
- Every other control or separator character (form feed, vertical tab, NEL, U+2028, ...) becomes a space, so no
  line can turn into two.
- A line is translated sentence by sentence, and a sentence longer than the model's positions is cut into pieces
  that fit (`fit`, runtime.translator.Translator.fit); Chinese joins sentences and pieces without spaces. An empty
  or blank line translates to "".

The sentence splitter is hand-written on purpose: the deployable core carries no dependency beyond onnxruntime,
sentencepiece, numpy and tqdm, and the segmenters on PyPI either need data downloaded at run time (NLTK's punkt)
or are rule sets of the same kind, larger and unmaintained (pysbd). A splitter here only has to be conservative
(two sentences kept together still translate; one cut in two does not). It knows the common English
abbreviations, initials and dotted acronyms ("Mr. Smith", "U.S. Army", "e.g. this").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# Every C0/C1 control (line feed too: a JSONL or Parquet text may hold one inside a line), the Unicode line and
# paragraph separators, and the byte-order mark.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")
# A candidate sentence end: . ! ? (optionally closed by a quote or bracket), space, then a capital or digit.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx no nos fig figs vol ed eds rev gen col lt sgt "
    "capt cmdr gov pres rep sen inc ltd co corp dept univ est jan feb mar apr jun jul aug sep sept oct nov dec "
    "mon tue wed thu fri sat sun p.m a.m u.s u.k u.n e.u".split()
)
DOTTED = re.compile(r"(?:\b[A-Za-z]\.){2,}$|(?:^|\s)[A-Z]\.$")  # U.S. / e.g. / an initial ("J.")


def clean(line: str) -> str:
    """Control and separator characters as spaces: the translator never sees anything that could break a line."""
    return CONTROL.sub(" ", line)


def split_sentences(line: str) -> list[str]:
    """A line as its sentences (a single sentence comes back alone); abbreviations do not end one."""
    parts, start = [], 0
    for match in SENTENCE_END.finditer(line):
        end = match.start() + len(match.group(0).rstrip())
        before = line[start : match.start()]
        word = before.rsplit(None, 1)[-1] if before.split() else ""
        if word.endswith(".") and (word[:-1].lower().strip("(\"'") in ABBREVIATIONS or DOTTED.search(before)):
            continue
        parts.append(line[start:end].strip())
        start = match.end()
    parts.append(line[start:].strip())
    return [p for p in parts if p]


@dataclass(frozen=True)
class Cut:
    """A sentence too long for the model, translated in `pieces` pieces: text `text` (0-based), line `line`
    (1-based, within that text)."""

    text: int
    line: int
    pieces: int


@dataclass
class Segments:
    """Texts as the flat list of pieces the model translates, and how to join the translations back."""

    pieces: list[str] = field(default_factory=list)
    # Per text, per line, per sentence: how many pieces (a line with no sentence translates to "").
    shape: list[list[list[int]]] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)

    def join(self, translated: Iterable[str]) -> list[str]:
        """One translation per text: pieces and sentences joined without spaces, lines with "\\n"."""
        done = iter(translated)
        out = [
            "\n".join("".join("".join(next(done) for _ in range(n)) for n in line) for line in lines)
            for lines in self.shape
        ]
        if next(done, None) is not None:
            raise ValueError("more translations than pieces")
        return out


def segment(texts: Iterable[str], fit: Callable[[str], list[str]] | None = None) -> Segments:
    """Texts as their lines, sentences and (with `fit`, which cuts a sentence that is too long) pieces."""
    out = Segments()
    for t, text in enumerate(texts):
        lines = []
        for number, line in enumerate(text.split("\n"), 1):
            line = line.removesuffix("\r")
            sentences = []
            for sentence in split_sentences(clean(line)):
                pieces = fit(sentence) if fit else [sentence]
                if len(pieces) > 1:
                    out.cuts.append(Cut(t, number, len(pieces)))
                out.pieces += pieces
                sentences.append(len(pieces))
            lines.append(sentences)
        out.shape.append(lines)
    return out
