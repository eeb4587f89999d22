"""The Deploy quickstart (README.md, docs/deploying.md): one generated block from the migrate run published in
docs/reference-quickstart/ (lab.quickstart). The README holds what that run gives; the Makefile publishes the
commands the block types, from a fresh run; the published file holds no path of the machine that made it; the
publisher keeps only examples every variant past both gates prints alike; and (e2e) the block's commands, run as a
reader types them after the install line, print what the block says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from mtonnx.lab import docs, quickstart
from mtonnx.report.prose import GENERATED_END

PUBLISHED = REPO / "docs" / docs.QUICKSTART_REFERENCE
REFERENCE = REPO / "docs" / "reference"
MARKER = "<!-- generated: quickstart -->"
SENTENCES = ["Hello, teacher!", "He wears a suit.", "Let's go.", "The road is crowded.", "I like tea.", "Good night."]


def block(text: str) -> str:
    """The quickstart's generated block in a page."""
    start = text.index(MARKER) + len(MARKER)
    return text[start : text.index(GENERATED_END, start)].strip()


def commands(text: str) -> list[str]:
    """The lines of a block's bash fence."""
    return re.search(r"```bash\n(.*?)```", text, re.DOTALL).group(1).strip().splitlines()


def test_the_readme_holds_the_quickstart_the_published_run_gives():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert (PUBLISHED / docs.QUICKSTART_FILE).is_file(), "make docs-refresh publishes the quickstart's migrate run"
    assert MARKER in readme and MARKER in (REPO / "docs" / "deploying.md").read_text(encoding="utf-8")
    assert block(readme) == docs.quickstart(PUBLISHED, REFERENCE), "make docs-refresh writes the README's quickstart"
    assert readme.index("pip install -e") < readme.index(MARKER)  # the install line comes first


def test_the_block_shows_each_example_beside_its_reference_and_the_model_s_size_from_a_run():
    run = json.loads((PUBLISHED / docs.QUICKSTART_FILE).read_text(encoding="utf-8"))
    shown = docs.quickstart(PUBLISHED, REFERENCE)
    migrate, translate = commands(shown)
    assert migrate == f"mtonnx migrate --model {docs.QUICKSTART_MODEL} --out {docs.QUICKSTART_OUT}"
    assert translate.endswith(f"| mtonnx translate --run {docs.QUICKSTART_OUT}")
    for example in run["examples"]:
        assert f"| {example['en']} | {example['output']} | {example['reference']} |" in shown
    params_total = json.loads((REFERENCE / "metrics.json").read_text(encoding="utf-8"))["inspect"]["params_total"]
    assert f"({params_total / 1e6:.1f} million parameters, counted by the reference run)" in shown
    assert f"{sum(run['seconds'].values()):.0f} s" in shown and f"**{run['recommended']}**" in shown
    assert docs.quickstart(REPO / "no-such-dir", REFERENCE).startswith("No quickstart run is published")


def test_the_makefile_publishes_a_fresh_run_of_what_the_block_types_and_no_machine_path():
    recipe = (REPO / "Makefile").read_text(encoding="utf-8").split("\ndocs-refresh:")[1].split("\n\n")[0]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    migrate = f"$(PYTHON) -m mtonnx migrate --model {docs.QUICKSTART_MODEL} --out {docs.QUICKSTART_OUT}"
    assert steps.index(f"rm -rf {docs.QUICKSTART_OUT}") < steps.index(migrate)  # its steps' time is a fresh run's
    assert steps[-1] == f"$(PYTHON) -m mtonnx.lab.quickstart {docs.QUICKSTART_OUT} docs README.md"
    text = (PUBLISHED / docs.QUICKSTART_FILE).read_text(encoding="utf-8")
    assert re.findall(r'"(/[^"]*)"', text) == [] and str(REPO) not in text


@pytest.fixture
def migrated_run(tmp_path, hand_export) -> Path:
    """A finished migrate run as lab.quickstart reads it, on the tiny model's hand export: fp32 and fp32-tuned
    past both gates (int8 not), fp32-tuned deployed, and the gates' translations where fp32-tuned differs from fp32
    on one sentence and int8 on another."""
    from mtonnx.runtime import Translator, layout

    run = tmp_path / "run"
    for where in ("deploy", "variants/fp32", "variants/fp32-tuned"):
        shutil.copytree(hand_export, run / where)
    greedy = Translator(hand_export).translate(SENTENCES, num_beams=1)
    variants = {"fp32": greedy, "fp32-tuned": [*greedy[:1], "(other)", *greedy[2:]], "int8": ["(other)"] * 6}
    (run / "variants" / layout.TRANSLATIONS).write_text(
        json.dumps({"sources": SENTENCES, "references": ["你好。"] * 6, "variants": variants}), encoding="utf-8"
    )
    rows = {"fp32": ("pass", "pass"), "int8": ("pass", "fail"), "fp32-tuned": ("pass", "pass")}
    quant = {name: {"gate": gate, "fidelity_gate": fidelity} for name, (gate, fidelity) in rows.items()}
    (run / "metrics.json").write_text(json.dumps({"quant": {**quant, "recommended": "fp32-tuned"}}), encoding="utf-8")
    env = json.loads((Path(__file__).parent / "data" / "reference" / "env.json").read_text(encoding="utf-8"))
    env["params"]["model"] = {"name": "hsk-enzh"}
    (run / "env.json").write_text(json.dumps({**env, "params_file": str(tmp_path / "p.yaml")}), encoding="utf-8")
    (run / "steps").mkdir()
    for second, (step, seconds) in enumerate({"export": 20.5, "gates": 9.25, "deploy": 0.1}.items()):
        (run / "steps" / f"{step}.json").write_text(json.dumps({"key": "k", "seconds": seconds, "result": {}}))
        os.utime(run / "steps" / f"{step}.json", (1_000_000 + second, 1_000_000 + second))
    return run


def test_the_examples_are_those_every_candidate_prints_alike(migrated_run, tmp_path):
    stable = [e["en"] for e in quickstart.stable_examples(migrated_run)]
    assert sorted(stable) == sorted(set(SENTENCES) - {"He wears a suit.", "Let's go."})  # fp32-tuned differs; a quote
    done = quickstart.publish(migrated_run, tmp_path / "published")
    assert done["seconds"] == {"export": 20.5, "gates": 9.25, "deploy": 0.1}  # in the order the steps finished
    assert done["recommended"] == "fp32-tuned" and "params_file" not in done["env"]
    printed = run_cli("translate", "--run", str(migrated_run), input="".join(f"{e['en']}\n" for e in done["examples"]))
    assert len(done["examples"]) == quickstart.EXAMPLES and all(e["en"] in stable for e in done["examples"])
    assert printed.stdout.splitlines() == [e["output"] for e in done["examples"]]
    assert json.loads((tmp_path / "published" / docs.QUICKSTART_FILE).read_text(encoding="utf-8")) == done
    shown = docs.quickstart(tmp_path / "published", REFERENCE)
    assert "Here migrate's steps took 30 s (0.5 minutes)" in shown


def test_the_publisher_refuses_a_run_of_another_model_or_an_unfinished_one(migrated_run, tmp_path):
    env = json.loads((migrated_run / "env.json").read_text(encoding="utf-8"))
    env["params"]["model"]["name"] = "tiny"
    (migrated_run / "env.json").write_text(json.dumps(env), encoding="utf-8")
    with pytest.raises(ValueError, match="migrated tiny, not the quickstart's models/hsk-enzh"):
        quickstart.publish(migrated_run, tmp_path / "published")
    shutil.rmtree(migrated_run / "deploy")
    assert quickstart.main([str(migrated_run), str(tmp_path)]) == 2
    assert not (tmp_path / docs.QUICKSTART_REFERENCE).exists()


@pytest.mark.e2e
def test_the_quickstart_s_commands_print_what_its_block_says(tmp_path):
    shown = block((REPO / "README.md").read_text(encoding="utf-8"))
    out = tmp_path / "quickstart"

    def typed(command: str) -> subprocess.CompletedProcess:  # as after the install line, into a fresh directory
        command = command.replace("mtonnx ", f"{sys.executable} -m mtonnx ").replace(docs.QUICKSTART_OUT, str(out))
        return subprocess.run(command, shell=True, cwd=REPO, capture_output=True, text=True, timeout=3000)

    migrate, translate = commands(shown)
    done = typed(migrate)
    assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == f"deploy: {out}/deploy", done.stderr[-3000:]
    rows = [line.split(" | ") for line in shown.splitlines() if line.startswith("| ") and " --- " not in line][1:]
    printed = typed(translate)
    assert printed.returncode == 0 and printed.stdout.splitlines() == [row[1] for row in rows], printed.stderr[-2000:]
    # the deploying page's Python and HTTP examples: the same sentences, the same answers
    published = json.loads((REPO / "docs" / docs.QUICKSTART_REFERENCE / docs.QUICKSTART_FILE).read_text())
    english, answers = [e["en"] for e in published["examples"]], [e["output"] for e in published["examples"]]
    assert answers == [row[1] for row in rows]
    from mtonnx.runtime import Translator

    assert Translator(out / "deploy").translate(english) == answers
    from starlette.testclient import TestClient

    from mtonnx.serve.app import create_app

    with TestClient(create_app(Translator(out / "deploy"))) as client:
        for _ in range(600):  # the warm-up translation runs in the background: ready first
            if client.get("/health/ready").status_code == 200:
                break
            time.sleep(0.05)
        answered = client.post("/translate", json={"q": english, "source": "en", "target": "zh"})
    assert answered.status_code == 200 and answered.json() == {"translatedText": answers}
