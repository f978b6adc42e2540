// Shared setup of the tokenizer tests: where tools/tokenize lives and whether `npm ci` has run there.
// Without node_modules every test is skipped with that reason (scripts/tokenize-setup installs them).
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const TOKENIZE_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "tools", "tokenize");
export const TOKENIZE_CLI = join(TOKENIZE_DIR, "tokenize.mjs");
export const COMMITTED_TABLE = join(TOKENIZE_DIR, "data", "deepseek_v3.compress.bin");

const installed = existsSync(join(TOKENIZE_DIR, "node_modules", "@lenml", "tokenizer-deepseek_v3"));
export const SKIP_NO_MODULES = installed ? false : "tools/tokenize/node_modules missing: run scripts/tokenize-setup (npm ci)";

// The tokenize library, or null when it cannot be loaded (tests then skip).
export async function loadLib() {
  if (!installed) return null;
  return import(join(TOKENIZE_DIR, "lib.mjs"));
}

// Hugging Face's Rust `tokenizers` Node binding (a devDependency), or null when absent.
export function loadHfTokenizers() {
  try {
    return createRequire(join(TOKENIZE_DIR, "package.json"))("tokenizers");
  } catch {
    return null;
  }
}
