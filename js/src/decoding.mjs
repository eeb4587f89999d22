/**
 * Greedy and beam search over any step function, with Hugging Face `generate`'s semantics: the Python runtime's
 * loop (src/mtonnx/runtime/decoding.py) in JavaScript, so a sentence gets the same tokens in Node, in the browser
 * and in Python.
 *
 * Ours because it is the lesson, and because Transformers.js decodes greedily only (its generate loop has no beam
 * search: a model whose generation config asks for 4 beams would translate greedily without a word). The rules are
 * transformers 4.57's, as in Python:
 * - logits processors: bad tokens -> -inf, eos -> -inf below min_length, forced_bos_token_id at the first generated
 *   position, forced_eos_token_id at the last allowed one (it wins when both fall on one step);
 * - greedy: argmax of the processed logits, ties to the lower id; finished rows continue with pad;
 * - beam search: log-softmax, processors, + running score, the top 2*beams continuations (ties to the lower index),
 *   the top `beams` of those not ending keep running, those that end join the finished set scored
 *   sum(logprob) / length**length_penalty, until no running beam can beat the worst finished one.
 *
 * Scores are float32, as numpy's: every sum, difference and quotient is rounded with Math.fround, so the running
 * and finished scores are the same numbers as Python's. The one float32 step that cannot be matched bit for bit is
 * the log-sum-exp of a row (numpy's vectorized exp and pairwise sum): it moves every score of a beam alike, so a
 * beam choice differs only where two beams' scores tie to a unit in the last place.
 *
 * A run is `{ step(tokens: BigInt64Array): Float32Array [rows * vocab], reorder(rows: Int32Array): void }`.
 * Unlike the Python loop, nothing here leaves the batch early (retirement changes the work, never the tokens).
 */

const f32 = Math.fround;
export const NEG = f32(-1.0e9); // transformers' "impossible" score, in float32

/** The one token a step allows, if any: eos at the last allowed position, else forced bos at the first. */
function forcedToken(curLen, s) {
  if (s.forcedEosTokenId != null && curLen === s.maxLength - 1) return s.forcedEosTokenId;
  return curLen === 1 && s.forcedBosTokenId != null ? s.forcedBosTokenId : null;
}

/** The tokens the processors set to -inf at this step (outside a forced step). */
function bannedTokens(curLen, s) {
  return [...s.badTokenIds, ...(curLen < s.minLength ? [s.eosTokenId] : [])];
}

/** generate()'s processors on one row of scores, in place. */
function processRow(row, curLen, s) {
  for (const t of bannedTokens(curLen, s)) if (t < row.length) row[t] = -Infinity;
  const forced = forcedToken(curLen, s);
  if (forced !== null) {
    row.fill(-Infinity);
    row[forced] = 0;
  }
}

/** Settings as the Python runtime's GenerationSettings.from_dir reads generation_config.json. */
export function generationSettings(config) {
  const bad = config.bad_words_ids ?? [];
  if (bad.some((words) => words.length !== 1)) throw new Error("only single-token bad_words_ids are supported");
  const eos = Array.isArray(config.eos_token_id) ? config.eos_token_id[0] : config.eos_token_id;
  return {
    decoderStartTokenId: config.decoder_start_token_id,
    eosTokenId: eos,
    padTokenId: config.pad_token_id,
    numBeams: config.num_beams ?? 1,
    maxLength: config.max_length ?? 20,
    minLength: config.min_length ?? 0,
    lengthPenalty: config.length_penalty ?? 1.0,
    earlyStopping: config.early_stopping ?? false,
    badTokenIds: bad.map((words) => words[0]),
    forcedEosTokenId: config.forced_eos_token_id ?? null,
    forcedBosTokenId: config.forced_bos_token_id ?? null,
  };
}

/** Overrides as generate() takes them: maxNewTokens sets maxLength = 1 + maxNewTokens. */
export function withOptions(s, { numBeams, maxNewTokens } = {}) {
  return {
    ...s,
    ...(numBeams != null ? { numBeams } : {}),
    ...(maxNewTokens != null ? { maxLength: 1 + maxNewTokens } : {}),
  };
}

function untilEos(row, eos) {
  const end = row.indexOf(eos);
  return end === -1 ? row : row.slice(0, end + 1);
}

/** Greedy decoding of `batch` rows: each row's generated ids up to and including eos. */
export async function greedy(run, batch, s) {
  let tokens = new BigInt64Array(batch).fill(BigInt(s.decoderStartTokenId));
  const unfinished = new Array(batch).fill(true);
  const generated = Array.from({ length: batch }, () => []);
  let curLen = 1;
  for (;;) {
    const logits = await run.step(tokens);
    const vocab = logits.length / batch;
    const next = new BigInt64Array(batch);
    for (let r = 0; r < batch; r++) {
      let token = s.padTokenId;
      if (unfinished[r]) {
        const row = logits.subarray(r * vocab, (r + 1) * vocab);
        processRow(row, curLen, s);
        token = argmax(row);
      }
      next[r] = BigInt(token);
      generated[r].push(token);
      if (token === s.eosTokenId) unfinished[r] = false;
    }
    tokens = next;
    curLen += 1;
    if (!unfinished.some(Boolean) || curLen >= s.maxLength) break;
  }
  return generated.map((row) => untilEos(row, s.eosTokenId));
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/** log_softmax of one row in float32 (max subtracted, then the log of the sum of exponentials), in place. */
function logSoftmax(row) {
  let peak = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > peak) peak = row[i];
  let total = 0;
  for (let i = 0; i < row.length; i++) {
    row[i] = f32(row[i] - peak);
    total += Math.exp(row[i]);
  }
  const logTotal = f32(Math.log(f32(total)));
  for (let i = 0; i < row.length; i++) row[i] = f32(row[i] - logTotal);
}

/** Indices of the k largest values, largest first, ties to the lower index (numpy's stable argsort of -values). */
function topK(values, k) {
  const order = Array.from(values.keys());
  order.sort((a, b) => (values[b] > values[a] ? 1 : values[b] < values[a] ? -1 : a - b));
  return order.slice(0, k);
}

/**
 * The `keep` best continuations of one sentence over its beams' scores (`runningScores`: the sentence's, one per
 * beam): [flat index, score], best first, ties to the lower flat index (beam * vocab + token), as
 * `_candidates_full` in Python.
 */
function candidates(logits, sentence, beams, vocab, runningScores, curLen, s, keep) {
  // A binary heap would be faster; a selection over beams x vocab keeps the rule visible and is fast enough.
  const best = []; // [flat, score], kept sorted best first, at most `keep`
  for (let b = 0; b < beams; b++) {
    const r = sentence * beams + b;
    const row = logits.subarray(r * vocab, (r + 1) * vocab);
    logSoftmax(row);
    processRow(row, curLen, s);
    const running = runningScores[b];
    for (let t = 0; t < vocab; t++) {
      const score = f32(row[t] + running);
      if (best.length === keep && !(score > best[keep - 1][1])) continue; // ties: the earlier (lower) index stays
      let at = best.length;
      while (at > 0 && score > best[at - 1][1]) at--;
      best.splice(at, 0, [b * vocab + t, score]);
      if (best.length > keep) best.pop();
    }
  }
  // -inf everywhere but a few (a forced step): fill with the lowest -inf indices, as numpy's sort does
  for (let flat = 0; best.length < keep; flat++) {
    if (!best.some(([f]) => f === flat)) best.push([flat, -Infinity]);
  }
  best.sort((x, y) => (y[1] > x[1] ? 1 : y[1] < x[1] ? -1 : x[0] - y[0]));
  return best;
}

/** Beam search over `batch` sentences x `s.numBeams` rows (the run holds batch * beams rows). */
export async function beamSearch(run, batch, s) {
  const k = s.numBeams;
  const keep = 2 * k;
  const prompt = 1;
  const seq = () => new Array(s.maxLength).fill(s.padTokenId);
  const sentences = Array.from({ length: batch }, () => ({
    running: Array.from({ length: k }, () => Object.assign(seq(), { 0: s.decoderStartTokenId })),
    runningScores: Array.from({ length: k }, (_, b) => (b === 0 ? 0 : NEG)),
    finished: Array.from({ length: k }, () => Object.assign(seq(), { 0: s.decoderStartTokenId })),
    finishedScores: new Array(k).fill(NEG),
    isFinished: new Array(k).fill(false),
    canImprove: true,
  }));
  let tokens = new BigInt64Array(batch * k).fill(BigInt(s.decoderStartTokenId));
  let curLen = 1;
  for (;;) {
    const logits = await run.step(tokens);
    const vocab = logits.length / (batch * k);
    const rows = new Int32Array(batch * k);
    let allHit = true;
    for (let i = 0; i < batch; i++) {
      const st = sentences[i];
      const cands = candidates(logits, i, k, vocab, st.runningScores, curLen, s, keep);
      const candBeam = cands.map(([flat]) => Math.floor(flat / vocab));
      const candToken = cands.map(([flat]) => flat % vocab);
      const candScores = cands.map(([, score]) => score);
      const candSeq = cands.map((_, j) => {
        const copy = st.running[candBeam[j]].slice();
        copy[curLen] = candToken[j];
        return copy;
      });
      const hits = candToken.map((t) => t === s.eosTokenId || curLen + 1 >= s.maxLength);
      if (!hits.every(Boolean)) allHit = false;

      const live = candScores.map((score, j) => f32(score + (hits[j] ? NEG : 0)));
      const pick = topK(live, k);
      st.running = pick.map((j) => candSeq[j]);
      st.runningScores = pick.map((j) => live[j]);
      const sourceBeam = pick.map((j) => candBeam[j]);

      const divisor = f32(Math.pow(curLen + 1 - prompt, s.lengthPenalty));
      const allDone = st.isFinished.every(Boolean) && s.earlyStopping === true;
      const normalized = candScores.map((score, j) => {
        let value = f32(score / divisor);
        value = f32(value + (allDone ? NEG : 0));
        value = f32(value + (st.canImprove ? 0 : NEG));
        return f32(value + (hits[j] && j < k ? 0 : NEG));
      });
      const merged = [...st.finishedScores, ...normalized];
      const best = topK(merged, k);
      const mergedSeq = [...st.finished, ...candSeq];
      const mergedFinished = [...st.isFinished, ...hits.map((hit, j) => hit && j < k)];
      st.finished = best.map((j) => mergedSeq[j]);
      st.finishedScores = best.map((j) => merged[j]);
      st.isFinished = best.map((j) => mergedFinished[j]);
      for (let b = 0; b < k; b++) rows[i * k + b] = i * k + sourceBeam[b];
    }
    curLen += 1;
    const length =
      s.earlyStopping === "never" && s.lengthPenalty > 0 ? s.maxLength - prompt : curLen - prompt;
    const lengthDivisor = f32(Math.pow(length, s.lengthPenalty));
    for (const st of sentences) {
      const bestRunning = f32(st.runningScores[0] / lengthDivisor);
      const worst = Math.min(...st.finishedScores);
      const beaten = st.isFinished.some((finished) => bestRunning > (finished ? worst : NEG));
      st.canImprove = st.canImprove && beaten;
    }
    const anyImprove = sentences.some((st) => st.canImprove);
    const allFinished = sentences.every((st) => st.isFinished.every(Boolean)) && s.earlyStopping === true;
    if (!(anyImprove && !allFinished && !allHit)) break;
    run.reorder(rows);
    tokens = new BigInt64Array(batch * k);
    sentences.forEach((st, i) => st.running.forEach((row, b) => (tokens[i * k + b] = BigInt(row[curLen - 1]))));
  }
  return sentences.map((st) => untilEos(st.finished[0].slice(1, curLen), s.eosTokenId));
}

/** Greedy when numBeams is 1, beam search otherwise. */
export function generate(run, batch, s) {
  return s.numBeams === 1 ? greedy(run, batch, s) : beamSearch(run, batch, s);
}
