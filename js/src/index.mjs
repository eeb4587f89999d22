/** mtonnx's JavaScript runtime: what a page or a Node program imports. */

export { beamSearch, generate, generationSettings, greedy, withOptions } from "./decoding.mjs";
export { Seq2SeqModel } from "./model.mjs";
export { MarianTokenizer } from "./tokenizer.mjs";
export { Translator } from "./translator.mjs";
