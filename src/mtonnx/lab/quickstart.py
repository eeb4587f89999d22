"""The Deploy quickstart's published run: `make docs-refresh` runs `mtonnx migrate` on the default model into
outputs/quickstart, then `python -m mtonnx.lab.quickstart outputs/quickstart docs README.md` publishes what the
quickstart shows (lab.docs.quickstart renders it) and fills the README's generated blocks.

Published into docs/QUICKSTART_REFERENCE/QUICKSTART_FILE, small and without a path of the machine that ran it: each
step's seconds as migrate recorded them (steps/*.json, in the order they finished), the recommended variant, the
run's env.json, and the example sentences. Those are picked from the run's own evaluation set so that what a reader
types prints what the quickstart says whichever variant migrate recommends on their machine: sentences every variant
that passed every gate translated alike, taken as scores.showcase orders them (the best translations
beside the worst: the model's limits in plain sight), kept when the quickstart's own `mtonnx translate` prints them
alike from the deployed model and from every other such variant.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import staged_dir, write_json
from mtonnx.lab import docs

EXAMPLES = 3
WORDS = 8  # the longest example: a line a reader types, that keeps the README short


def candidates_of(run_dir: str | Path) -> list[str]:
    """The variants past every gate that migrate chose its recommendation among (measure.variants.candidates)."""
    from mtonnx.measure.variants import candidates

    quant = json.loads((Path(run_dir) / "metrics.json").read_text(encoding="utf-8"))["quant"]
    return candidates({name: row for name, row in quant.items() if isinstance(row, dict) and "fidelity_gate" in row})


def stable_examples(run_dir: str | Path) -> list[dict[str, str]]:
    """The run's evaluation sentences of at most WORDS words that every candidate translated alike at the gates
    (greedy), in scores.showcase order, each with its reference."""
    from mtonnx.runtime import layout
    from mtonnx.scores import showcase

    translated = json.loads((Path(run_dir) / "variants" / layout.TRANSLATIONS).read_text(encoding="utf-8"))
    texts = zip(*(translated["variants"][name] for name in candidates_of(run_dir)))
    alike = [
        {"en": en, "reference": reference, "gates": outputs[0]}
        for en, reference, outputs in zip(translated["sources"], translated["references"], texts)
        if len(set(outputs)) == 1 and len(en.split()) <= WORDS and "'" not in en  # it reads as typed in '...'
    ]
    order = showcase([e["gates"] for e in alike], [e["reference"] for e in alike], count=len(alike))
    return [{"en": alike[i]["en"], "reference": alike[i]["reference"]} for i in order]


def translate_as_typed(where: list[str], sentences: list[str]) -> list[str]:
    """What `mtonnx translate WHERE` (`--run DIR` or `--model-dir DIR`) prints for these lines on its stdin."""
    done = subprocess.run(
        [sys.executable, "-m", "mtonnx", "translate", *where],
        input="".join(f"{s}\n" for s in sentences),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise ValueError(
            f"mtonnx translate {' '.join(where)} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return done.stdout.splitlines()


def examples(run_dir: str | Path, count: int = EXAMPLES) -> list[dict[str, str]]:
    """`count` of the stable examples that `mtonnx translate` prints alike from the deployed model and from every
    other candidate, all in one call as the quickstart types them, with what it prints (a sentence printed otherwise
    by one of them is left out, and the rest tried again)."""
    run_dir = Path(run_dir)
    where = [["--run", str(run_dir)], *(["--model-dir", str(run_dir / "variants" / n)] for n in candidates_of(run_dir))]
    pool = stable_examples(run_dir)
    while len(pool) >= count:
        trial = pool[:count]
        printed = list(zip(*(translate_as_typed(w, [e["en"] for e in trial]) for w in where), strict=True))
        differ = [e for e, lines in zip(trial, printed, strict=True) if len(set(lines)) > 1]
        if not differ:
            return [{**e, "output": lines[0]} for e, lines in zip(trial, printed, strict=True)]
        pool = [e for e in pool if e not in differ]
    raise ValueError(f"{run_dir}: fewer than {count} sentences translate alike with every variant past every gate")


def publish(run_dir: str | Path, published: str | Path) -> dict[str, Any]:
    """Replace `published` with QUICKSTART_FILE made from `run_dir`, a finished `mtonnx migrate` of the quickstart's
    model; ValueError when it is not one."""
    run_dir = Path(run_dir)
    missing = [n for n in ("metrics.json", "env.json", "steps", "deploy") if not (run_dir / n).exists()]
    if missing:
        raise ValueError(f"{run_dir} is not a finished migrate run: it has no {', '.join(missing)}")
    env = json.loads((run_dir / "env.json").read_text(encoding="utf-8"))
    model = env.get("params", {}).get("model", {}).get("name")
    if model != Path(docs.QUICKSTART_MODEL).name:
        raise ValueError(f"{run_dir} migrated {model}, not the quickstart's {docs.QUICKSTART_MODEL}")
    steps = sorted((run_dir / "steps").glob("*.json"), key=lambda p: p.stat().st_mtime)
    seconds = {p.stem: json.loads(p.read_text(encoding="utf-8"))["seconds"] for p in steps}
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    env.pop("params_file", None)  # a path of the machine that ran it (none without --params)
    done = {
        "seconds": seconds,
        "recommended": metrics["quant"]["recommended"],
        "examples": examples(run_dir),
        "env": env,
    }
    with staged_dir(published) as tmp:
        write_json(tmp / docs.QUICKSTART_FILE, done)
    return done


def main(argv: list[str] | None = None) -> int:
    """`python -m mtonnx.lab.quickstart RUN_DIR DOCS_DIR [FILE ...]`: publish RUN_DIR into
    DOCS_DIR/QUICKSTART_REFERENCE, then fill each FILE's generated blocks (README.md) from DOCS_DIR/reference."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mtonnx.lab.quickstart")
    parser.add_argument("run_dir", help=f"a finished `mtonnx migrate --model {docs.QUICKSTART_MODEL}`")
    parser.add_argument("docs_dir", help="the documentation directory (docs)")
    parser.add_argument("files", nargs="*", help="files whose generated blocks to fill (README.md)")
    args = parser.parse_args(argv)
    try:
        done = publish(args.run_dir, Path(args.docs_dir) / docs.QUICKSTART_REFERENCE)
    except ValueError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    print(
        f"quickstart: {sum(done['seconds'].values()):.0f} s of migrate steps, {done['recommended']} deployed, "
        f"{len(done['examples'])} examples",
        file=sys.stderr,
    )
    for name in args.files:
        changed = docs.fill(name, Path(args.docs_dir) / "reference")
        print(f"{name}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
