"""Typed-in measurements in prose: a number followed by a unit of time, size, speed or share ("67 sentences/s",
"5 ms", "2.5x", "40 %") written into a notebook's markdown or a document, where it goes stale the day the code or
the machine changes. The lab's numbers come from the run that prints them; prose says what to look at.

`findings` scans markdown text: code (fenced blocks and inline spans) is left out, since it is what a reader
types, and so is everything between GENERATED and GENERATED_END, which a run writes. ALLOWED names the few
number-and-unit phrases that are definitions rather than measurements, each with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

UNITS = (
    "sentences/s",
    "tokens/s",
    "seconds",
    "second",
    "minutes",
    "minute",
    "min",
    "sec",
    "ms",
    "s",
    "kB",
    "MiB",
    "MB",
    "GiB",
    "GB/s",
    "GB",
    "x",
    "×",
    "%",
)
MEASUREMENT = re.compile(
    r"(?<![\w.,])(?P<number>\d+(?:[.,]\d+)*)\s?-?\s?(?P<unit>" + "|".join(map(re.escape, UNITS)) + r")(?![\w/])"
)
ALLOWED = {
    "95 %": "the confidence level every interval of the project is computed at: a definition, not a measurement",
}
GENERATED, GENERATED_END = "<!-- generated -->", "<!-- /generated -->"  # a named one too: <!-- generated: params -->
BLOCK = re.compile(r"<!-- generated(?:: \w+)? -->.*?" + re.escape(GENERATED_END), re.DOTALL)
CODE = re.compile(r"```.*?```|~~~.*?~~~|`[^`\n]*`", re.DOTALL)


@dataclass(frozen=True)
class Finding:
    """One typed-in measurement: where (a file, with the cell or line) and the phrase as written."""

    where: str
    phrase: str
    context: str

    def __str__(self) -> str:
        return f"{self.where}: {self.phrase!r} in “{self.context}”"


def findings(text: str, where: str = "") -> list[Finding]:
    """The typed-in measurements of a markdown text, outside code and generated blocks, less the ALLOWED ones."""
    text = _without_generated(text)
    prose = CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)  # same offsets, so lines stay right
    out = []
    for match in MEASUREMENT.finditer(prose):
        phrase = f"{match['number']} {match['unit']}"
        if phrase in ALLOWED:
            continue
        line = prose.count("\n", 0, match.start()) + 1
        start, end = max(0, match.start() - 40), min(len(prose), match.end() + 40)
        context = " ".join(prose[start:end].split())
        out.append(Finding(f"{where}:{line}" if where else f"line {line}", match.group(), context))
    return out


def _without_generated(text: str) -> str:
    """The text with every generated block (GENERATED, or a named one, to GENERATED_END) blanked, line breaks kept."""
    return BLOCK.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def notebook_findings(path: str | Path) -> list[Finding]:
    """The typed-in measurements of every markdown cell of a notebook, each named by its cell."""
    import nbformat

    notebook = nbformat.read(str(path), as_version=4)
    return [
        finding
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "markdown"
        for finding in findings(cell.source, f"{Path(path).name} cell {i}")
    ]


def document_findings(path: str | Path) -> list[Finding]:
    """The typed-in measurements of a markdown document (README.md, docs/*.md), outside its generated blocks."""
    return findings(Path(path).read_text(encoding="utf-8"), Path(path).name)
