#!/usr/bin/env node
/**
 * `node js/src/cli.mjs WEB_DIR [DTYPE]`: the JavaScript runtime over JSON lines, for tests and the lesson, on
 * the web export's DTYPE precision (default: the one its web.json ships).
 *
 * Each stdin line is a request, each stdout line its answer:
 * - {"encode": [texts]} -> {"ids": [[ids]]}: the tokenizer's ids (the source prefix, pieces, eos);
 * - {"generate": [texts], "num_beams": n, "max_new_tokens": n, "batch_size": n} -> {"ids": [[ids]],
 *   "texts": [text]}: generated ids (up to and including eos) and their decoded text;
 * - {"transformersjs": [texts], "max_new_tokens": n, "batch": bool} -> {"texts": [text]}: Transformers.js's own
 *   translation pipeline on the same directory, offline, greedy; one text per call unless `batch`.
 * A request that fails answers {"error": message}; the process carries on.
 */

import path from "node:path";
import readline from "node:readline";

import { loadTranslator } from "./node.mjs";

const [directory, dtype = null] = process.argv.slice(2);
if (!directory) {
  process.stderr.write("usage: node js/src/cli.mjs WEB_DIR [DTYPE]\n");
  process.exit(2);
}
const translator = await loadTranslator(directory, { intraOpNumThreads: 1, interOpNumThreads: 1 }, dtype);

let pipe = null; // Transformers.js's translation pipeline, loaded on its first request

async function transformersjs(texts, maxNewTokens, batch = false) {
  if (pipe === null) {
    const { env, pipeline } = await import("@huggingface/transformers");
    env.allowRemoteModels = false;
    env.localModelPath = path.dirname(path.resolve(directory));
    const precision = translator.manifest.dtype;
    pipe = await pipeline("translation", path.basename(path.resolve(directory)), { dtype: precision, device: "cpu" });
  }
  // One text per call: in a batch, Transformers.js's greedy output can keep the tokens a row generated after its
  // eos (the row went on while its neighbours were unfinished), so a sentence's translation depends on its batch.
  const options = { max_new_tokens: maxNewTokens, num_beams: 1 };
  const out = batch ? await pipe(texts, options) : [];
  if (!batch) for (const text of texts) out.push((await pipe([text], options))[0]);
  return { texts: out.map((o) => o.translation_text) };
}

async function answer(request) {
  if (request.transformersjs) return transformersjs(request.transformersjs, request.max_new_tokens ?? 64, request.batch);
  if (request.encode) {
    const prefix = request.source_prefix ?? translator.manifest.source_prefix ?? "";
    return { ids: request.encode.map((t) => translator.tokenizer.encode(`${prefix} ${t}`.trim())) };
  }
  const options = { batchSize: request.batch_size ?? 8, numBeams: request.num_beams, maxNewTokens: request.max_new_tokens };
  const ids = await translator.generateAll(request.generate, options);
  return { ids, texts: ids.map((row) => translator.tokenizer.decode(row)) };
}

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  let reply;
  try {
    reply = await answer(JSON.parse(line));
  } catch (err) {
    reply = { error: String(err?.message ?? err) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
