/**
 * The web export's two ONNX files on ONNX Runtime (onnxruntime-node or onnxruntime-web, passed in): the encoder and
 * optimum's merged decoder, whose `use_cache_branch` input picks the first step (no cache) or a cached step.
 *
 * A run holds the encoder output and every layer's self-attention cache, and follows the decoding loop's
 * `reorder` (a beam continuing another beam's row copies that row's cache). The cross-attention cache the first
 * step returns is kept as it is: beams only move within their sentence, whose rows share one source.
 */

// ORT's fusions minus SkipLayerNormFusion, as the Python runtime's sessions (runtime/sessions.py): that fusion sums
// in another order, and int8 amplifies the last bits, so with it some sentences get other tokens than in Python.
const DISABLED = { optimization: { disable_specified_optimizers: "SkipLayerNormFusion" } };

const CACHE = /^past_key_values\.(\d+)\.(decoder|encoder)\.(key|value)$/;

export class Seq2SeqModel {
  /** `ort` is the onnxruntime module; `files` maps a file name to its bytes (Uint8Array) or a path. */
  static async load(ort, files, config, sessionOptions = {}) {
    const options = { executionProviders: ["cpu"], graphOptimizationLevel: "all", extra: DISABLED, ...sessionOptions };
    const encoder = await ort.InferenceSession.create(files.encoder, options);
    const decoder = await ort.InferenceSession.create(files.decoder, options);
    return new Seq2SeqModel(ort, encoder, decoder, config);
  }

  constructor(ort, encoder, decoder, config) {
    this.ort = ort;
    this.encoder = encoder;
    this.decoder = decoder;
    this.pastNames = decoder.inputNames.filter((name) => CACHE.test(name));
    this.selfNames = this.pastNames.filter((name) => name.includes(".decoder."));
    this.heads = config.decoder_attention_heads;
    this.headDim = config.d_model / config.decoder_attention_heads;
  }

  tensor(type, data, dims) {
    return new this.ort.Tensor(type, data, dims);
  }

  /** Encode a padded batch (input ids and mask as arrays of rows) and start a run of `expand` rows per sentence. */
  async begin(inputIds, attentionMask, expand = 1) {
    const rows = inputIds.length;
    const width = inputIds[0].length;
    const ids = this.tensor("int64", BigInt64Array.from(inputIds.flat(), BigInt), [rows, width]);
    const mask = this.tensor("int64", BigInt64Array.from(attentionMask.flat(), BigInt), [rows, width]);
    const { last_hidden_state: hidden } = await this.encoder.run({ input_ids: ids, attention_mask: mask });
    if (expand === 1) return new Run(this, hidden, mask);
    const size = hidden.data.length / rows;
    const wide = new Float32Array(size * rows * expand);
    const wideMask = new BigInt64Array(width * rows * expand);
    for (let r = 0; r < rows * expand; r++) {
      const from = Math.floor(r / expand);
      wide.set(hidden.data.subarray(from * size, (from + 1) * size), r * size);
      wideMask.set(mask.data.subarray(from * width, (from + 1) * width), r * width);
    }
    return new Run(
      this,
      this.tensor("float32", wide, [rows * expand, ...hidden.dims.slice(1)]),
      this.tensor("int64", wideMask, [rows * expand, width]),
    );
  }
}

class Run {
  constructor(model, hidden, mask) {
    this.model = model;
    this.hidden = hidden;
    this.mask = mask;
    this.cache = null; // input name -> tensor, from the previous step's present outputs
  }

  /** Feed one token per row; the step's logits as one Float32Array, [rows * vocab]. */
  async step(tokens) {
    const m = this.model;
    const rows = tokens.length;
    const feeds = {
      input_ids: m.tensor("int64", tokens, [rows, 1]),
      encoder_attention_mask: this.mask,
      encoder_hidden_states: this.hidden,
      use_cache_branch: m.tensor("bool", new Uint8Array([this.cache === null ? 0 : 1]), [1]),
    };
    for (const name of m.pastNames) {
      feeds[name] = this.cache?.[name] ?? m.tensor("float32", new Float32Array(0), [rows, m.heads, 0, m.headDim]);
    }
    const out = await m.decoder.run(feeds);
    const next = {};
    for (const name of m.pastNames) {
      const present = name.replace("past_key_values", "present");
      // the cached branch hands the cross-attention cache back unchanged: keep the first step's
      next[name] = this.cache !== null && name.includes(".encoder.") ? this.cache[name] : out[present];
    }
    this.cache = next;
    const logits = out.logits;
    const vocab = logits.dims[logits.dims.length - 1];
    const steps = logits.dims[1];
    if (steps === 1) return logits.data;
    const last = new Float32Array(rows * vocab);
    for (let r = 0; r < rows; r++) {
      last.set(logits.data.subarray((r * steps + steps - 1) * vocab, (r * steps + steps) * vocab), r * vocab);
    }
    return last;
  }

  /** Row i continues row rows[i]: the self-attention cache follows (the cross-attention one stays). */
  reorder(rows) {
    if (rows.every((from, i) => from === i)) return;
    const m = this.model;
    for (const name of m.selfNames) {
      const t = this.cache[name];
      const size = t.data.length / t.dims[0];
      const moved = new Float32Array(t.data.length);
      rows.forEach((from, i) => moved.set(t.data.subarray(from * size, (from + 1) * size), i * size));
      this.cache[name] = m.tensor("float32", moved, t.dims);
    }
  }
}
