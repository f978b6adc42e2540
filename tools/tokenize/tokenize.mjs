#!/usr/bin/env node
// engram tokenizer preprocessing: UTF-8 text -> DeepSeek-V3 token ids, and the Engram compression table.
//
//   node tokenize.mjs tokens --out OUT.tokens [--add-bos] TEXT...
//       Tokenizes each text file (no special tokens; --add-bos puts id 0 before each file's tokens) and
//       writes OUT.tokens: the ids of all files back to back, little-endian uint32, plus OUT.tokens.json
//       naming the tokenizer, its version, vocab size, token count and each file's token range.
//   node tokenize.mjs table --out OUT.bin [--tokenizer-json FILE [--tokenizer-config FILE]] [--pad-id N]
//       Writes the compression table: OUT.bin = canonical id of every token id (little-endian uint32,
//       len(tokenizer) entries) and OUT.bin.json with V' (compressed_vocab_size), the pad id and its
//       canonical id, the tokenizer name and version and the SHA-256 of the tokenizer.json it came
//       from. --tokenizer-json uses a model directory's own tokenizer instead of the bundled
//       DeepSeek-V3 one (its tokenizer_config.json: --tokenizer-config, else the one next to it, else
//       the bundled one); --pad-id is the model's pad token id (config.json engram_pad_token_id).
//   node tokenize.mjs keys ID...
//       Prints one JSON line per id: decoded text, canonical key (debugging aid).
//
// A sidecar is always the data file's path plus ".json". Files are written to a temporary name and
// renamed, so a failed run leaves no half-written output. Bad input (non-UTF-8 text, an empty file, an
// unreadable path) exits with status 2 and a message naming the file; nothing is written then.
import { renameSync, writeFileSync, statSync } from "node:fs";
import { basename } from "node:path";
import { pathToFileURL } from "node:url";

import {
  BOS_ID, BUNDLED_TOKENIZER_JSON, DEFAULT_PAD_ID, TOKENIZER_NAME, TOKENIZER_PACKAGE, TOKENIZER_VERSION,
  buildCompressionTable, compressionKey, decodeOne, encodeText, loadTokenizer, loadTokenizerFromFile,
  readUtf8Text, sha256File, tokenizerLength,
} from "./lib.mjs";

class UsageError extends Error {}

function parseArgs(argv) {
  const opts = { out: null, addBos: false, tokenizerJson: null, tokenizerConfig: null, padId: null, rest: [] };
  const value = (i, name) => {
    if (i + 1 >= argv.length) throw new UsageError(`${name} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === "--out") opts.out = value(i++, a);
    else if (a === "--tokenizer-json") opts.tokenizerJson = value(i++, a);
    else if (a === "--tokenizer-config") opts.tokenizerConfig = value(i++, a);
    else if (a === "--pad-id") {
      const v = value(i++, a);
      if (!/^[0-9]+$/.test(v)) throw new UsageError(`--pad-id '${v}': expected a non-negative integer`);
      opts.padId = Number(v);
    } else if (a === "--add-bos") opts.addBos = true;
    else if (a.startsWith("--")) throw new UsageError(`unknown option ${a}`);
    else opts.rest.push(a);
  }
  return opts;
}

function writeAtomic(path, data) {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data);
  renameSync(tmp, path);
}

// The tokenizer asked for (--tokenizer-json, else the bundled one) and the sidecar fields naming it.
// A file-loaded tokenizer is named by its content ("tokenizer.json@<first 12 hex of its SHA-256>"), so
// token files and tables built from the same file match wherever the file lies.
function openTokenizer(opts) {
  if (opts.tokenizerConfig && !opts.tokenizerJson) throw new UsageError("--tokenizer-config needs --tokenizer-json");
  const source = opts.tokenizerJson ?? BUNDLED_TOKENIZER_JSON;
  const tok = opts.tokenizerJson ? loadTokenizerFromFile(opts.tokenizerJson, opts.tokenizerConfig).tok : loadTokenizer();
  const sha = sha256File(source);
  return {
    tok,
    fields: {
      tokenizer: opts.tokenizerJson ? `tokenizer.json@${sha.slice(0, 12)}` : TOKENIZER_NAME,
      tokenizer_package: TOKENIZER_PACKAGE,
      tokenizer_version: TOKENIZER_VERSION,
      vocab_size: tokenizerLength(tok),
      tokenizer_json_sha256: sha,
      tokenizer_json_bytes: statSync(source).size,
    },
  };
}

function littleEndianU32(values) {
  const buf = Buffer.alloc(values.length * 4);
  for (let i = 0; i < values.length; ++i) buf.writeUInt32LE(values[i], i * 4);
  return buf;
}

function cmdTokens(opts) {
  if (!opts.out) throw new UsageError("tokens: --out OUT.tokens is required");
  if (opts.rest.length === 0) throw new UsageError("tokens: give at least one text file");
  // Read and validate every input before the (slower) tokenizer load, so bad input fails fast.
  if (opts.padId !== null) throw new UsageError("tokens: --pad-id applies to the table command");
  const texts = opts.rest.map((path) => ({ path, text: readUtf8Text(path), bytes: statSync(path).size }));
  const { tok, fields } = openTokenizer(opts);
  const all = [];
  const documents = [];
  for (const { path, text, bytes } of texts) {
    const ids = encodeText(tok, text);
    const first = all.length;
    if (opts.addBos) all.push(BOS_ID);
    for (const id of ids) all.push(id);
    documents.push({ source: path, source_bytes: bytes, first_token: first, token_count: all.length - first });
  }
  const meta = {
    format: "engram-tokens",
    format_version: 1,
    ...fields,
    dtype: "uint32le",
    file: basename(opts.out),
    token_count: all.length,
    add_bos: opts.addBos,
    documents,
  };
  writeAtomic(opts.out, littleEndianU32(all));
  writeAtomic(`${opts.out}.json`, JSON.stringify(meta, null, 2) + "\n");
  process.stderr.write(`tokenize: ${all.length} tokens from ${texts.length} file(s) -> ${opts.out}\n`);
}

function cmdTable(opts) {
  if (!opts.out) throw new UsageError("table: --out OUT.bin is required");
  if (opts.rest.length) throw new UsageError("table: takes no positional arguments");
  const { tok, fields } = openTokenizer(opts);
  const padId = opts.padId ?? DEFAULT_PAD_ID;
  if (padId >= fields.vocab_size) throw new UsageError(`--pad-id ${padId} is not a token id (vocabulary of ${fields.vocab_size})`);
  const t = buildCompressionTable(tok);
  const meta = {
    format: "engram-compression-table",
    format_version: 1,
    ...fields,
    dtype: "uint32le",
    file: basename(opts.out),
    compressed_vocab_size: t.compressedVocab,
    pad_id: padId,
    pad_compressed_id: t.canonical[padId],
    normalizer: "NFKC, NFD, strip General_Category=Mark, lowercase per code point, [ \\t\\r\\n]+ -> ' ', " +
      "keep a lone ' ', strip White_Space; U+FFFD in decoded text -> raw token; empty -> decoded text",
    unicode_version: process.versions.unicode ?? "unknown",
  };
  writeAtomic(opts.out, littleEndianU32(t.canonical));
  writeAtomic(`${opts.out}.json`, JSON.stringify(meta, null, 2) + "\n");
  process.stderr.write(`tokenize: compression table ${t.vocabSize} -> ${t.compressedVocab} ids -> ${opts.out}\n`);
}

function cmdKeys(opts) {
  const tok = loadTokenizer();
  const n = tokenizerLength(tok);
  for (const a of opts.rest) {
    const id = Number(a);
    if (!Number.isInteger(id) || id < 0 || id >= n) throw new UsageError(`keys: id ${a} not in [0, ${n})`);
    process.stdout.write(JSON.stringify({ id, token: tok.model.vocab[id], decoded: decodeOne(tok, id), key: compressionKey(tok, id) }) + "\n");
  }
}

export function main(argv) {
  const [cmd, ...rest] = argv;
  try {
    const opts = parseArgs(rest);
    if (cmd === "tokens") cmdTokens(opts);
    else if (cmd === "table") cmdTable(opts);
    else if (cmd === "keys") cmdKeys(opts);
    else throw new UsageError(`unknown command '${cmd ?? ""}' (expected tokens, table or keys)`);
    return 0;
  } catch (e) {
    process.stderr.write(`tokenize: ${e.message}\n`);
    return 2;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) process.exitCode = main(process.argv.slice(2));
