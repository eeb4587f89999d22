"""What each notebook needs from earlier ones, as it declares it, and which notebooks a partial run must add.

A notebook declares, in its top-level metadata, `"mtonnx": {"needs": ["01", "02"], "records": ["manual_export"]}`:
the numbers of the notebooks whose files or metrics it reads, and the metrics sections it records. A need is met
when the needed notebook runs earlier in the same invocation, or already ran in the run directory (every section
it records is there). `plan` adds the unmet ones, and theirs, so `mtonnx run --only 08` on a fresh directory runs
what 08 reads first instead of computing a result on nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mtonnx.report.record import METRICS_DIR

KEY = "mtonnx"


class PrerequisiteError(ValueError):
    """A declaration that cannot be followed (a need with no such notebook); str() is one line."""


@dataclass(frozen=True)
class Declaration:
    """A notebook's declared needs (notebook numbers) and the metrics sections it records."""

    needs: tuple[str, ...] = ()
    records: tuple[str, ...] = ()


def declaration(notebook: str | Path) -> Declaration:
    """The notebook's `mtonnx` metadata (an empty Declaration when it declares none)."""
    meta = json.loads(Path(notebook).read_text(encoding="utf-8")).get("metadata", {}).get(KEY, {})
    return Declaration(tuple(meta.get("needs", ())), tuple(meta.get("records", ())))


def number(notebook: Path) -> str:
    """A numbered notebook's number: `08` for 08_pitfalls.ipynb."""
    return notebook.name[:2]


def ran(run_dir: str | Path, notebook: Path) -> bool:
    """True when the notebook already ran in the run directory: every section it records is there."""
    records = declaration(notebook).records
    return bool(records) and all((Path(run_dir) / METRICS_DIR / f"{s}.json").is_file() for s in records)


def plan(selected: list[Path], available: list[Path], run_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """(the notebooks to run, in order; the prerequisites among them that were not selected): `selected` plus every
    notebook of `available` one of them needs, directly or through another, that has not run in `run_dir`."""
    by_number = {number(p): p for p in available}
    chosen = {number(p): p for p in selected}
    pending = list(selected)
    while pending:
        notebook = pending.pop()
        for need in declaration(notebook).needs:
            if need >= number(notebook) or need not in by_number:
                raise PrerequisiteError(
                    f"{notebook.name} needs notebook {need}, which "
                    + ("does not come before it" if need in by_number else f"is not among {sorted(by_number)}")
                )
            if need not in chosen and not ran(run_dir, by_number[need]):
                chosen[need] = by_number[need]
                pending.append(by_number[need])
    added = [chosen[n] for n in sorted(chosen) if chosen[n] not in selected]
    return [chosen[n] for n in sorted(chosen)], added
