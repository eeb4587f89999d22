"""The engines the benchmark times, declared once: what each is called, what it loads (a recipe of the variant
registry, or a peer's own files), how measure.peers drives it, and how the results page names it.

`bench.engines` in the params, the studies' engine lists and the results page's words all come from here, so
timing another variant beside the peers is one entry: an `Engine` of kind "mtonnx" naming its recipe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """One engine of the benchmark."""

    name: str
    words: str  # how the results page names it
    kind: str  # how measure.peers loads and runs it: pytorch, optimum, mtonnx, mtonnx-search or ct2
    precision: str = "fp32"
    variant: str | None = None  # the variant registry's recipe it loads (kinds mtonnx and mtonnx-search)
    vmap: bool = False  # CTranslate2 with the shortlist as its vocabulary map
    selectable: bool = True  # in `bench.engines`; the others belong to one study (the search graph, the shortlist)
    corpus: bool = False  # also timed on the corpus workload (every sentence at its real length)
    package: str = "onnxruntime"  # the distribution it needs


ENGINES = (  # in the order the results page lists them
    Engine("pytorch-fp32", "PyTorch fp32", "pytorch", package="torch"),
    Engine("pytorch-int8", "PyTorch int8 (dynamic quantization)", "pytorch", "int8", package="torch"),
    Engine("optimum-fp32", "optimum fp32", "optimum", package="optimum-onnx"),
    Engine("mtonnx-fp32", "mtonnx fp32-tuned", "mtonnx", variant="fp32-tuned"),
    Engine("mtonnx-int8", "mtonnx int8-tuned", "mtonnx", "int8", variant="int8-tuned", corpus=True),
    Engine(
        "mtonnx-shortlist-int8",
        "mtonnx int8-tuned-shortlist (lossy)",
        "mtonnx",
        "int8",
        "int8-tuned-shortlist",
        selectable=False,
    ),
    Engine(
        "mtonnx-search-int8", "mtonnx int8-search-graph", "mtonnx-search", "int8", "int8-search-graph", selectable=False
    ),
    Engine("ct2-fp32", "CTranslate2 fp32", "ct2", package="ctranslate2"),
    Engine("ct2-int8", "CTranslate2 int8", "ct2", "int8", corpus=True, package="ctranslate2"),
    Engine(
        "ct2-vmap-int8",
        "CTranslate2 int8 with the shortlist as its vocabulary map (lossy)",
        "ct2",
        "int8",
        vmap=True,
        selectable=False,
        package="ctranslate2",
    ),
)
BY_NAME = {e.name: e for e in ENGINES}
SELECTABLE = tuple(e.name for e in ENGINES if e.selectable)  # what `bench.engines` may name
CORPUS = tuple(e.name for e in ENGINES if e.corpus)  # timed on the corpus workload
SEARCH = (
    "mtonnx-int8",
    "mtonnx-search-int8",
    "ct2-int8",
)  # the search-graph study: the runtime, the graph, CTranslate2
SHORTLIST = ("mtonnx-int8", "mtonnx-shortlist-int8", "ct2-int8", "ct2-vmap-int8")  # the shortlist study's four
PROFILE_PEER = "ct2-int8"  # the engine the profile study times beside the runtime, on the same rows
