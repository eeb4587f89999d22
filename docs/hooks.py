"""mkdocs hooks (mkdocs.yml: hooks): the lab's notebooks in the navigation, every page's generated blocks and the
footer's data attribution, all from mtonnx.lab.docs and the reference run in docs/reference/."""

import posixpath
import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError

from mtonnx.data import HSK_CREDIT
from mtonnx.lab import docs

REFERENCE = "reference"


def on_config(config):
    """The reference run's notebooks under the lab's page; the HSK data's attribution on every page."""
    if not Path(config.docs_dir, REFERENCE).is_dir():
        raise PluginError(f"{config.docs_dir}/{REFERENCE}/ is missing: `make docs-refresh` publishes the reference run")
    config.nav = docs.lab_nav(config.nav, "lab.md", Path(config.docs_dir, REFERENCE), REFERENCE)
    config.copyright = HSK_CREDIT
    return config


def on_page_markdown(markdown, page, config, files):
    """The page with its generated blocks filled in, links to the reference run made relative to the page."""
    href = posixpath.relpath(REFERENCE, posixpath.dirname(page.file.src_uri) or ".")
    return docs.render(markdown, Path(config.docs_dir, REFERENCE), href)


def on_post_build(config):
    """The reference run's markdown files also as they are: its report links the model card as a .md file."""
    for source in Path(config.docs_dir, REFERENCE).rglob("*.md"):
        target = Path(config.site_dir, source.relative_to(config.docs_dir))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
