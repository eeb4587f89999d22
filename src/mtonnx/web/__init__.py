"""The model for the browser and Node: the web export and the JavaScript runtime beside it.

- `tokenizer_json`: a Marian tokenizer as one tokenizer.json, with sentencepiece's normalizer kept;
- `export`: the web export (optimum's layout, as Transformers.js loads it, plus web.json);
- `node`: the JavaScript runtime (js/) driven from Python, for the parity checks.
"""
