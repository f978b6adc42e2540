// Description: `tokenize.mjs table --tokenizer-json` (a model directory's own tokenizer): the bundled
// DeepSeek-V3 tokenizer.json read from its file gives the committed table byte for byte, the sidecar
// names the file's SHA-256 (as `engram table info` and read_model_compression_table check it) and the
// pad id asked for; a missing file, a file that is not a tokenizer, a pad id outside the vocabulary
// and --tokenizer-config without --tokenizer-json exit 2 and write nothing.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import { COMMITTED_TABLE, SKIP_NO_MODULES, TOKENIZE_CLI, TOKENIZE_DIR } from "./helpers.mjs";

const dir = mkdtempSync(join(tmpdir(), "engram-model-tokenizer-test-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const BUNDLED = join(TOKENIZE_DIR, "node_modules", "@lenml", "tokenizer-deepseek_v3", "models", "tokenizer.json");

function runCli(...args) {
  return spawnSync(process.execPath, [TOKENIZE_CLI, ...args], { encoding: "utf8" });
}

test("table --tokenizer-json: the bundled file gives the committed table; the sidecar names its SHA-256", { skip: SKIP_NO_MODULES }, () => {
  const out = join(dir, "model.compress.bin");
  const r = runCli("table", "--tokenizer-json", BUNDLED, "--pad-id", "2", "--out", out);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(readFileSync(out).equals(readFileSync(COMMITTED_TABLE)), "table bytes equal the committed table");
  const meta = JSON.parse(readFileSync(`${out}.json`, "utf8"));
  const sha = createHash("sha256").update(readFileSync(BUNDLED)).digest("hex");
  assert.equal(meta.tokenizer_json_sha256, sha);
  assert.equal(meta.tokenizer, `tokenizer.json@${sha.slice(0, 12)}`);
  assert.equal(meta.compressed_vocab_size, 98627);
  assert.equal(meta.pad_id, 2);
  const committed = JSON.parse(readFileSync(`${COMMITTED_TABLE}.json`, "utf8"));
  assert.equal(committed.tokenizer_json_sha256, sha, "the committed sidecar names the bundled tokenizer.json");
});

test("table --tokenizer-json: bad input exits 2 and writes nothing", { skip: SKIP_NO_MODULES }, () => {
  const out = join(dir, "bad.bin");
  let r = runCli("table", "--tokenizer-json", join(dir, "missing.json"), "--out", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /missing\.json: cannot read: ENOENT/);
  const notTok = join(dir, "tokenizer.json");
  writeFileSync(notTok, "[1, 2, 3]");
  r = runCli("table", "--tokenizer-json", notTok, "--out", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /not a Hugging Face tokenizer\.json/);
  writeFileSync(notTok, "{ nope");
  r = runCli("table", "--tokenizer-json", notTok, "--out", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /not valid JSON/);
  r = runCli("table", "--pad-id", "1000000", "--out", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--pad-id 1000000 is not a token id/);
  r = runCli("table", "--pad-id", "x", "--out", out);
  assert.equal(r.status, 2);
  r = runCli("table", "--tokenizer-config", notTok, "--out", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--tokenizer-config needs --tokenizer-json/);
  assert.equal(existsSync(out), false);
  assert.equal(existsSync(`${out}.json`), false);
});
