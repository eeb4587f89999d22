"""The web export's gates: the JavaScript runtime in Node against the Python runtime on the same ONNX files, the
int8 files' fidelity to fp32, and the page in a browser.

Both runtimes tokenize the evaluation sentences and translate them greedily and with the generation config's
beams; every id list must be equal. Node's tokens are compared against the Python runtime on the same files, so
any difference is the JavaScript side's (its tokenizer, its decoding loop, onnxruntime-node's kernels), never the
export's. The int8 files ship only when, on top of that, they pass the fidelity gate every variant passes. The page
runs onnxruntime-web's WASM kernels, another implementation of the same graphs, so it is gated as a variant is: its
translations' fidelity to fp32's, with its ids against Node's counted beside. When Node or a browser cannot run
here, that gate is not measured and says why: a web export that was not checked is still written, marked
unchecked, since a machine without Node is no evidence against it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtonnx.runtime.translator import Translator
from mtonnx.web.node import NodeRuntime, unavailable

EDGE_CASES = [  # inputs on which a tokenizer's normalization or lattice can go wrong
    "“Curly quotes,” an em dash — and an ellipsis…",  # unicode punctuation
    "Ｆｕｌｌ－ｗｉｄｔｈ：ＡＢＣ　１２３！",  # full-width forms and the ideographic space
    "ﬁne ﬀ ½ ① ㎏ Ⅻ ℌ",  # NFKC folds each of these
    "e\u0301 vs é, and a\u00a0no-break\u2009thin space",  # a combining accent; odd spaces
    "tabs\tand   runs of   spaces ",
    "Hello 世 world",  # a character source.spm lacks, which the target side has
    "Hello 世界 world",  # a run of them: one <unk> piece, looked up whole
    "€100 ‘x’",
    "a </s> b <unk> c",  # special tokens typed in the text are kept whole
    ">>cmn_Hans<< A target-language prefix",
    "A code >>cmn_Hans<< inside the text",  # text there: Marian keeps a code whole only at the start
    "",
]


def node_parity(
    web_dir: str | Path,
    onnx_dir: str | Path,
    sources: list[str],
    beams: int,
    max_new_tokens: int,
    source_prefix: str = "",
    dtype: str | None = None,
) -> dict[str, Any]:
    """{gate, sentences, tokenizer, greedy, beam<beams>: how many of the sentences agree} or {gate: not measured,
    reason}, for the web export's `dtype` files (default: those it ships) against the Python runtime on
    `onnx_dir`; gate `pass` only when every id list is equal. Both translate with the run's `max_new_tokens`: a
    generation config's max_length (512 for opus-mt) would let an untrained model decode hundreds of steps."""
    return _node_check(web_dir, onnx_dir, sources, beams, max_new_tokens, source_prefix, dtype)[0]


def _node_check(
    web_dir: str | Path,
    onnx_dir: str | Path,
    sources: list[str],
    beams: int,
    max_new_tokens: int,
    source_prefix: str,
    dtype: str | None,
) -> tuple[dict[str, Any], list[list[int]], list[str]]:
    """node_parity's result, with Node's ids and translations with `beams` (empty when not measured)."""
    problem = unavailable()
    if problem:
        return {"gate": "not measured", "reason": problem}, [], []
    python = Translator(onnx_dir, decoder="merged")
    encoded = [python.tokenizer.encode(f"{source_prefix} {text}".strip()) for text in sources]
    result: dict[str, Any] = {"sentences": len(sources)}
    with NodeRuntime(web_dir, dtype) as node:
        result["tokenizer"] = sum(a == b for a, b in zip(node.encode(sources, source_prefix), encoded))
        for name, n in (("greedy", 1), (f"beam{beams}", beams)):
            expected = python.generate_sorted(encoded, 8, num_beams=n, max_new_tokens=max_new_tokens)
            ids, texts = node.generate(sources, num_beams=n, max_new_tokens=max_new_tokens)
            result[name] = sum(a == b for a, b in zip(ids, expected))
    counts = [v for k, v in result.items() if k != "sentences"]
    result["gate"] = "pass" if all(c == len(sources) for c in counts) else "fail"
    return result, ids, texts


PageFactory = Callable[..., Any]  # (web_dir, dtype=...) -> a context manager with generate(): lab.webpage.PageSession
PAGE_SENTENCES = 50


def web_gate(
    web_dir: str | Path,
    fp32_dir: str | Path,
    sources: list[str],
    beams: int,
    max_new_tokens: int,
    fidelity_min: float,
    *,
    source_prefix: str = "",
    quantized_dir: str | Path | None = None,
    page: PageFactory | None = None,
) -> dict[str, Any]:
    """The web export's gates and the precision they choose:
    - `node`: Node on the fp32 files against the Python runtime on `fp32_dir` (node_parity);
    - `q8` (with `quantized_dir`): Node on the q8 files against the Python runtime on `quantized_dir`, and the
      fidelity of Node's q8 translations to its fp32 ones (scores.fidelity, with the beams), gated at
      `fidelity_min` as every variant is;
    - `browser`: the page (`page`, a PageSession) on the chosen precision and the first PAGE_SENTENCES sentences:
      its ids against Node's, and the fidelity gate of its translations against fp32's (`_page_check`).
    `dtype` is q8 when every q8 gate in Node passes, else fp32, and `gate` is `fail` when Node gives other tokens
    than the Python runtime on the precision shipped, or the page fails its fidelity gate (the export is then not
    published)."""
    from mtonnx.measure.verdicts import fidelity_gate
    from mtonnx.scores import fidelity

    args = (sources, beams, max_new_tokens, source_prefix)
    fp32, fp32_ids, fp32_texts = _node_check(web_dir, fp32_dir, *args, "fp32")
    result: dict[str, Any] = {"node": fp32, "dtype": "fp32"}
    chosen_ids = fp32_ids
    if quantized_dir is not None and fp32["gate"] == "pass":
        q8, q8_ids, q8_texts = _node_check(web_dir, quantized_dir, *args, "q8")
        result["q8"] = {"node": q8}
        if q8["gate"] == "pass":
            result["q8"]["fidelity"] = fidelity(q8_texts, fp32_texts)
            result["q8"]["fidelity_gate"] = fidelity_gate(result["q8"]["fidelity"]["same_as_fp32_ci"], fidelity_min)
            if result["q8"]["fidelity_gate"] == "pass":
                result["dtype"], chosen_ids = "q8", q8_ids
    elif quantized_dir is not None:
        result["q8"] = {"node": {"gate": "not measured", "reason": "Node's fp32 gate did not pass"}}
    result["browser"] = _page_check(page, web_dir, result["dtype"], sources, chosen_ids, fp32_texts, fidelity_min, args)
    shipped = [fp32["gate"], result["browser"]["gate"]] + (
        [result["q8"]["node"]["gate"]] if result["dtype"] == "q8" else []
    )
    result["gate"] = "fail" if "fail" in shipped else fp32["gate"]
    return result


def _page_check(
    page: PageFactory | None,
    web_dir: str | Path,
    dtype: str,
    sources: list[str],
    node_ids: list[list[int]],
    fp32_texts: list[str],
    fidelity_min: float,
    args: tuple[list[str], int, int, str],
) -> dict[str, Any]:
    """The page's gate on the first PAGE_SENTENCES sentences: {gate, dtype, sentences, same_as_node, fidelity,
    load_s}, or {gate: not measured, reason}. The gate is the fidelity gate, as for any variant: onnxruntime-web's
    WASM kernels sum in another order than the native ones Node and Python share, so where logits nearly tie (an
    untrained model's do) a token can differ while the translation does not; `same_as_node` counts the id lists
    equal to Node's all the same."""
    from mtonnx.measure.verdicts import fidelity_gate
    from mtonnx.scores import fidelity

    if page is None:
        return {"gate": "not measured", "reason": "no browser given (Chromium through Playwright is the lab's)"}
    if not node_ids:
        return {"gate": "not measured", "reason": "no Node tokens to compare the page's with"}
    texts = sources[:PAGE_SENTENCES]
    _, beams, max_new_tokens, _ = args
    try:
        with page(web_dir, dtype=dtype) as session:
            ids, translations, _ = session.generate(texts, num_beams=beams, max_new_tokens=max_new_tokens)
            load_s = session.load_s
    except RuntimeError as error:  # no Chromium here, or no Playwright: the gate is not measured, and says why
        return {"gate": "not measured", "reason": str(error).splitlines()[0]}
    faithful = fidelity(translations, fp32_texts[: len(texts)])
    return {
        "gate": fidelity_gate(faithful["same_as_fp32_ci"], fidelity_min),
        "dtype": dtype,
        "sentences": len(texts),
        "same_as_node": sum(a == b for a, b in zip(ids, node_ids)),
        "fidelity": faithful,
        "load_s": load_s,
    }


TOKENIZERS = ("node", "tokenizer_json", "without_normalizer")  # tokenizer_cases' columns besides the runtime's


def tokenizer_cases(web_dir: str | Path, model_dir: str | Path, texts: list[str]) -> list[dict[str, Any]]:
    """Per text, the ids of: the Python runtime (the reference), Node (js/), the web export's tokenizer.json in Rust
    `tokenizers` as it is, and the same file without its normalizer, as Transformers.js's own conversion writes
    it; and which of the last three differ from the reference. Node is left out (None) when it cannot run here."""
    import tokenizers

    from mtonnx.runtime.tokenizer import MarianSpmTokenizer

    spec = json.loads((Path(web_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    as_is = tokenizers.Tokenizer.from_str(json.dumps(spec))
    bare = tokenizers.Tokenizer.from_str(json.dumps({**spec, "normalizer": None}))
    python = MarianSpmTokenizer(model_dir)
    node_ids: list[list[int] | None] = [None] * len(texts)
    if unavailable() is None:
        with NodeRuntime(web_dir) as node:
            node_ids = node.encode(texts, "")
    rows = []
    for text, js in zip(texts, node_ids):
        reference = python.encode(text)
        row = {
            "text": text,
            "runtime": reference,
            "node": js,
            "tokenizer_json": as_is.encode(text).ids,
            "without_normalizer": bare.encode(text).ids,
        }
        row["differ"] = [k for k in TOKENIZERS if row[k] not in (None, reference)]
        rows.append(row)
    return rows
