"""The model for the browser and Node: the web export and the JavaScript runtime beside it.

- `tokenizer_json`: a Marian tokenizer as one tokenizer.json, with sentencepiece's normalizer kept;
- `export`: the web export (optimum's layout, as Transformers.js loads it, plus web.json);
- `quantized`: its int8 files, the deployed recipe's quantization on optimum's pair;
- `node`: the JavaScript runtime (js/) driven from Python, for the parity checks;
- `parity`: the gates: Node against the Python runtime, int8's fidelity to fp32, the page against Node;
- `gated`: the export written, gated and kept at the precision its gates chose (the pipeline's stage, export-web).
"""
