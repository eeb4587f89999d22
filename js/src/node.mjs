/** The JavaScript runtime in Node: a web export directory on onnxruntime-node. */

import { readFile } from "node:fs/promises";
import path from "node:path";
import * as ort from "onnxruntime-node";

import { Translator } from "./translator.mjs";

/** A Translator of the web export in `directory`, on its `dtype` precision (default: the one web.json ships). */
export function loadTranslator(directory, sessionOptions = {}, dtype = null) {
  return Translator.load(ort, (name) => readFile(path.join(directory, name)), sessionOptions, dtype);
}
