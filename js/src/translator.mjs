/**
 * A web export translating text: its tokenizer, its two ONNX files and the decoding loop, wired as the Python
 * runtime's Translator wires them. Works in Node and in the browser: the caller passes the onnxruntime module and
 * a `read(name)` that returns a file's bytes (fs in Node, fetch in a page).
 */

import { beamSearch, generationSettings, greedy, withOptions } from "./decoding.mjs";
import { Seq2SeqModel } from "./model.mjs";
import { MarianTokenizer } from "./tokenizer.mjs";

const text = (bytes) => JSON.parse(new TextDecoder().decode(bytes));

/** web.json with `files` and `dtype` set to the precision `dtype` (null: as it is); an Error naming the others. */
export function filesOf(manifest, dtype) {
  if (!dtype || dtype === manifest.dtype) return manifest;
  const files = manifest.precisions?.[dtype];
  if (!files) throw new Error(`this web export has no ${dtype} files: it has ${Object.keys(manifest.precisions ?? { [manifest.dtype]: 1 }).join(", ")}`);
  return { ...manifest, dtype, files };
}

export class Translator {
  /**
   * Load a web export: `read(name)` gives the bytes of a file of it (web.json names the ONNX files). `dtype` picks
   * one of its precisions (web.json's `precisions`); by default the one it ships (`dtype`).
   */
  static async load(ort, read, sessionOptions = {}, dtype = null) {
    const manifest = filesOf(text(await read("web.json")), dtype);
    const [tokenizerJson, config, generation] = await Promise.all(
      ["tokenizer.json", "config.json", "generation_config.json"].map(async (name) => text(await read(name))),
    );
    const files = { encoder: await read(manifest.files.encoder), decoder: await read(manifest.files.decoder) };
    const model = await Seq2SeqModel.load(ort, files, config, sessionOptions);
    return new Translator(new MarianTokenizer(tokenizerJson, manifest.target_ids), model, generation, manifest);
  }

  constructor(tokenizer, model, generation, manifest) {
    this.tokenizer = tokenizer;
    this.model = model;
    this.settings = generationSettings(generation);
    this.manifest = manifest;
  }

  /** Generated ids of one batch of texts (each up to and including eos). */
  async generate(texts, { numBeams, maxNewTokens, sourcePrefix = this.manifest.source_prefix ?? "" } = {}) {
    const s = withOptions(this.settings, { numBeams, maxNewTokens });
    const { inputIds, attentionMask } = this.tokenizer.batch(texts, sourcePrefix);
    const run = await this.model.begin(inputIds, attentionMask, s.numBeams);
    return s.numBeams === 1 ? greedy(run, texts.length, s) : beamSearch(run, texts.length, s);
  }

  /** Generated ids of texts, `batchSize` at a time, in order. */
  async generateAll(texts, { batchSize = 8, ...options } = {}) {
    const out = [];
    for (let i = 0; i < texts.length; i += batchSize) out.push(...(await this.generate(texts.slice(i, i + batchSize), options)));
    return out;
  }

  /** Translations of texts, `batchSize` at a time. */
  async translate(texts, options = {}) {
    return (await this.generateAll(texts, options)).map((row) => this.tokenizer.decode(row));
  }
}
