/**
 * The JavaScript runtime in a page: the web export next to it, on onnxruntime-web (WASM), fetched with progress.
 *
 * WASM runs on one thread unless the page is cross-origin isolated (SharedArrayBuffer needs the COOP and COEP
 * headers, which `mtonnx serve --web` sends); it then takes up to 4.
 */

import * as ort from "onnxruntime-web";

import { filesOf, Translator } from "./translator.mjs";

/** The bytes of a URL, reporting each chunk's size to `onChunk` as it arrives. */
async function fetchBytes(url, onChunk) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.length;
    onChunk(value.length);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  return bytes;
}

/**
 * A Translator of the web export at `base` (a URL ending in /), on its `dtype` precision (default: the one web.json
 * ships); `onProgress(loaded, total)` follows the download of its two ONNX files.
 */
export async function loadTranslator(base, onProgress = () => {}, dtype = null) {
  ort.env.wasm.wasmPaths = new URL("vendor/", base).href;
  ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  const manifest = filesOf(JSON.parse(new TextDecoder().decode(await fetchBytes(new URL("web.json", base), () => {}))), dtype);
  const total = Object.values(manifest.files).reduce((sum, name) => sum + (manifest.sizes?.[name] ?? 0), 0);
  let loaded = 0;
  const read = (name) =>
    fetchBytes(new URL(name, base), (n) => {
      loaded += n;
      onProgress(loaded, total);
    });
  return Translator.load(ort, read, {}, dtype);
}
