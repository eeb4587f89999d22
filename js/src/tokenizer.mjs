/**
 * MarianTokenizer in JavaScript, on the web export's tokenizer.json and @huggingface/tokenizers (the library
 * Transformers.js tokenizes with), giving the Python runtime's ids.
 *
 * The library does the work: the added (special) tokens kept whole, the normalizer, the `▁` pre-tokenizer and the
 * Unigram lattice. Two rules of Marian's a tokenizer.json cannot state are added here, as the Python runtime
 * (src/mtonnx/runtime/tokenizer.py) has them:
 * - the lattice is source.spm's: the pieces only the target side has (scored UNREACHABLE by the export) are left
 *   out, so a run of characters source.spm does not cover becomes one `<unk>` piece, as in sentencepiece; its
 *   text is then looked up in vocab.json (`世` in English text gets the target side's id for `世`);
 * - a leading `>>lang<<` code is kept whole, and only there.
 * Decoding keeps target.spm's rule: pieces it lacks read ` ⁇ `; the special ids are dropped.
 */

import { Tokenizer } from "@huggingface/tokenizers";

export const UNREACHABLE = -1.0e6; // the export's score for a piece only the target side has (web/tokenizer_json.py)
const SPACE = "\u2581";
const UNKNOWN_SURFACE = " \u2047 "; // sentencepiece's text for a piece it lacks

export class MarianTokenizer {
  /** `tokenizerJson`: the parsed tokenizer.json; `targetIds`: the ids of target.spm's pieces (web.json). */
  constructor(tokenizerJson, targetIds) {
    const model = tokenizerJson.model;
    this.pieces = model.vocab.map(([piece]) => piece);
    this.ids = new Map(this.pieces.map((piece, id) => [piece, id]));
    this.unkId = model.unk_id;
    const specials = tokenizerJson.added_tokens.filter((t) => t.special);
    this.specialIds = new Set(specials.map((t) => t.id));
    this.eosId = this.ids.get("</s>");
    this.padId = this.ids.get("<pad>");
    this.target = new Set(targetIds);
    const kept = new Set([model.unk_id, ...specials.map((t) => t.id)]);
    const source = model.vocab.filter(([, score], id) => score !== UNREACHABLE || kept.has(id));
    const sourceModel = { ...model, vocab: source, unk_id: source.findIndex(([piece]) => piece === this.pieces[this.unkId]) };
    const addedAt = new Map(specials.map((t) => [t.content, source.findIndex(([p]) => p === t.content)]));
    // Only the special tokens: a `>>lang<<` code (an added token, so that Transformers.js keeps a prefix whole) counts
    // only at the start, as in Marian, which `encode` sees to; elsewhere it is text.
    const added = specials
      .map((t) => ({ ...t, id: addedAt.get(t.content) }))
      .filter((t) => t.id >= 0);
    this.source = new Tokenizer({ ...tokenizerJson, model: sourceModel, added_tokens: added, post_processor: null }, {});
  }

  /** Ids of one text: a leading `>>lang<<` code, the pieces, eos. */
  encode(text) {
    const ids = [];
    let rest = text;
    const end = rest.startsWith(">>") ? rest.indexOf("<<") : -1;
    if (end !== -1) {
      const code = rest.slice(0, end + 2);
      ids.push(this.ids.get(code) ?? this.unkId);
      rest = rest.slice(end + 2);
    }
    if (rest) {
      for (const piece of this.source.encode(rest, { add_special_tokens: false }).tokens) {
        ids.push(this.ids.get(piece) ?? this.unkId);
      }
    }
    ids.push(this.eosId);
    return ids;
  }

  /** (inputIds, attentionMask) as arrays of rows, right-padded with pad to the longest text. */
  batch(texts, sourcePrefix = "") {
    const encoded = texts.map((t) => this.encode(`${sourcePrefix} ${t}`.trim()));
    const width = Math.max(...encoded.map((ids) => ids.length));
    return {
      inputIds: encoded.map((ids) => [...ids, ...new Array(width - ids.length).fill(this.padId)]),
      attentionMask: encoded.map((ids) => [...ids.map(() => 1), ...new Array(width - ids.length).fill(0)]),
    };
  }

  /** Text of generated ids, special ids dropped, joined as target.spm joins pieces. */
  decode(ids) {
    const pieces = ids.filter((id) => !this.specialIds.has(id)).map((id) => (this.target.has(id) ? this.pieces[id] : null));
    const text = pieces.map((piece) => piece ?? UNKNOWN_SURFACE).join("");
    return text.replaceAll(SPACE, " ").trim();
  }
}
