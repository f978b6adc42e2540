// Synthetic model directories in the released Hugging Face format (see model_io.hpp): the fixture
// generator behind `engram table create --format hf-model`.
//
// The directory imitates the released one where it matters to a reader: several shards named
// model-000NN-of-000MM.safetensors, an index mapping every tensor to its shard, config.json with the
// Engram fields in text_config, unrelated tensors of every layer (BF16 norms and FP8 weights with
// F8_E8M0 scales of their own, so a reader must find the table by name, not by dtype) in the first
// shards, and each Engram layer's table in a shard of its own at the end, with that layer's other
// Engram tensors (wkv, q/k weights) interleaved between its weight and scale in the data section.
// Table rows are synth_row(seed, layer index, row), including the rows past the primes; unrelated
// tensors hold deterministic pseudo-random bytes. Everything is written into a temporary sibling
// directory, fsync'ed, and renamed into place only when complete.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/splitmix.hpp"
#include "host/json_text.hpp"
#include "host/model_io.hpp"
#include "host/safetensors.hpp"
#include "host/safetensors_write.hpp"
#include "host/token_io.hpp"
#include "sys/owner.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

using json = nlohmann::json;

constexpr int kHidden = 64;            // hidden size of the imitation (unrelated tensors only)
constexpr int64_t kModelVocabRows = 256;
constexpr int64_t kMaxCopyBytes = int64_t{1} << 30;
constexpr const char* kGenerator = "synth_row";

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

std::string shard_name(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", index, count);
  return buf;
}

// A tensor of deterministic pseudo-random bytes (a group of its own).
TensorGroup noise_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, uint64_t seed) {
  int64_t row_bytes = safetensors_dtype_bytes(dtype);
  for (size_t k = 1; k < shape.size(); ++k) row_bytes *= shape[k];
  uint64_t name_hash = 0xcbf29ce484222325ull;
  for (unsigned char c : name) name_hash = (name_hash ^ c) * 0x100000001b3ull;
  const int64_t rows = shape[0];
  return {rows,
          {{name, dtype, std::move(shape)}},
          [row_bytes, base = mix_seed(seed, name_hash)](int64_t lo, int64_t hi, std::span<uint8_t* const> out) {
            for (int64_t r = lo; r < hi; ++r) {
              uint64_t state = mix_seed(base, static_cast<uint64_t>(r));
              uint8_t* p = out[0] + (r - lo) * row_bytes;
              for (int64_t b = 0; b < row_bytes; b += 8) {
                const uint64_t v = splitmix64(state);
                for (int64_t k = 0; k < 8 && b + k < row_bytes; ++k) p[b + k] = static_cast<uint8_t>(v >> (8 * k));
              }
            }
          }};
}

struct Shard {
  std::string name;
  std::vector<TensorGroup> groups;
  std::vector<std::pair<size_t, size_t>> order;  // data order; empty = groups' order
  int64_t bytes = 0;
};

int64_t group_bytes(const TensorGroup& g) {
  int64_t total = 0;
  for (const TensorSpec& t : g.tensors) {
    int64_t b = safetensors_dtype_bytes(t.dtype);
    for (int64_t dim : t.shape) b *= dim;
    total += b;
  }
  return total;
}

Status copy_file(const std::string& from, const std::string& to) {
  ENGRAM_ASSIGN_OR_RETURN(const std::string data, sys::read_small_file(from, kMaxCopyBytes));
  return sys::write_new_file(to, data);
}

std::string parent_of(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
}

// True when `dir` holds a config.json written by this generator (the only kind overwrite replaces).
bool is_synthetic_model_dir(const std::string& dir) {
  auto text = sys::read_small_file(dir + "/" + kModelConfigFile, int64_t{64} << 20);
  if (!text.is_ok()) return false;
  auto c = parse_model_config(*text, kModelConfigFile);
  return c.is_ok() && c->synthetic_generator == std::string(kGenerator);
}

Status write_impl(const std::string& dir, const EngramLayout& layout, const SyntheticModelOptions& opt) {
  // ---- checks before anything is written ----
  if (layout.head_offsets.size() != layout.layer_ids.size() || layout.layer_ids.empty())
    return invalid("the layout is not finalized");
  for (int64_t v : layout.vocab_size_per_order)
    if (v != layout.vocab_size_per_order.front())
      return invalid("layout " + layout.name + ": vocab_size_per_order " + list_text(layout.vocab_size_per_order) +
                     " differs between orders; config.json has one engram_vocab_size");
  if (opt.extra_rows < 0 || opt.extra_rows > (int64_t{1} << 32))
    return invalid("extra_rows = " + std::to_string(opt.extra_rows) + " is not in [0, 2^32]");
  if (opt.other_shards < 1 || opt.other_shards > 64)
    return invalid("other_shards = " + std::to_string(opt.other_shards) + " is not in [1, 64]");
  if (opt.pad_token_id < 0) return invalid("pad_token_id must be >= 0");
  if (opt.names.weight == opt.names.scale || opt.names.weight.find("{L}") == std::string::npos ||
      opt.names.scale.find("{L}") == std::string::npos)
    return invalid("tensor names '" + opt.names.weight + "', '" + opt.names.scale + "': two different names with {L}");
  int64_t compressed_vocab = opt.compressed_vocab_size;
  int64_t model_vocab = kModelVocabRows;
  if (!opt.compression_table.empty()) {
    ENGRAM_ASSIGN_OR_RETURN(const CompressionTable t, read_compression_table(opt.compression_table));
    if (compressed_vocab == 0) compressed_vocab = t.compressed_vocab;
    model_vocab = t.vocab_size();
  }
  if (compressed_vocab <= 0)
    return invalid("no compressed vocabulary size: give a compression table or compressed_vocab_size");
  for (const std::string* f : {&opt.tokenizer_json, &opt.tokenizer_config_json})
    if (!f->empty()) {
      ENGRAM_ASSIGN_OR_RETURN(const bool there, sys::path_exists(*f));
      if (!there) return Status(Code::kNotFound, *f + " does not exist (file to copy into the model directory)");
    }
  if (dir.empty() || dir == "/") return invalid("'" + dir + "' does not name a new directory");
  const std::string parent = parent_of(dir);
  if (!sys::is_directory(parent)) return Status(Code::kNotFound, "parent directory " + parent + " does not exist");
  ENGRAM_ASSIGN_OR_RETURN(const bool exists, sys::path_exists(dir));
  if (exists && !opt.overwrite) return invalid(dir + " already exists (pass --force to replace a synthetic model directory)");
  if (exists && !is_synthetic_model_dir(dir))
    return invalid("refusing to replace " + dir + ": it is not a synthetic model directory written by this tool");

  // ---- the tensors, shard by shard ----
  const int n_engram = layout.n_layers();
  const int n_shards = opt.other_shards + n_engram;
  const int n_layers = *std::max_element(layout.layer_ids.begin(), layout.layer_ids.end()) + 2;
  const int d = layout.d;
  const int hash_cols = layout.heads();
  std::vector<Shard> shards(static_cast<size_t>(n_shards));
  for (int s = 0; s < n_shards; ++s) shards[static_cast<size_t>(s)].name = shard_name(s + 1, n_shards);
  const uint64_t seed = opt.seed;
  shards.front().groups.push_back(noise_tensor("embed.weight", "BF16", {kModelVocabRows, kHidden}, seed));
  for (int i = 0; i < n_layers; ++i) {
    Shard& sh = shards[static_cast<size_t>(i * opt.other_shards / n_layers)];
    const std::string p = "layers." + std::to_string(i) + ".";
    sh.groups.push_back(noise_tensor(p + "attn_norm.weight", "BF16", {kHidden}, seed));
    sh.groups.push_back(noise_tensor(p + "attn.wq.weight", "F8_E4M3", {kHidden, kHidden}, seed));
    sh.groups.push_back(noise_tensor(p + "attn.wq.scale", "F8_E8M0", {kHidden / 32, kHidden / 32}, seed));
    sh.groups.push_back(noise_tensor(p + "ffn.w1.weight", "F8_E4M3", {2 * kHidden, kHidden}, seed));
    sh.groups.push_back(noise_tensor(p + "ffn.w1.scale", "F8_E8M0", {2 * kHidden / 32, kHidden / 32}, seed));
  }
  shards[static_cast<size_t>(opt.other_shards - 1)].groups.push_back(noise_tensor("norm.weight", "BF16", {kHidden}, seed));
  shards[static_cast<size_t>(opt.other_shards - 1)].groups.push_back(
      noise_tensor("head.weight", "BF16", {kModelVocabRows, kHidden}, seed));
  std::vector<int64_t> num_embeddings;
  for (int li = 0; li < n_engram; ++li) {
    Shard& sh = shards[static_cast<size_t>(opt.other_shards) + static_cast<size_t>(li)];
    const int id = layout.layer_ids[static_cast<size_t>(li)];
    const std::string p = "layers." + std::to_string(id) + ".engram.";
    const int64_t rows = layout.rows(li) + opt.extra_rows;
    num_embeddings.push_back(rows);
    sh.groups.push_back(noise_tensor(p + "wkv.weight", "F8_E4M3", {2 * kHidden, int64_t{hash_cols} * d}, seed));
    sh.groups.push_back({rows,
                         {{opt.names.weight_of(id), "F8_E4M3", {rows, d}}, {opt.names.scale_of(id), "F8_E8M0", {rows, d / 32}}},
                         [seed, li, d](int64_t lo, int64_t hi, std::span<uint8_t* const> out) {
                           for (int64_t r = lo; r < hi; ++r)
                             synth_row(seed, li, r, d, out[0] + (r - lo) * d, out[1] + (r - lo) * (d / 32));
                         }});
    sh.groups.push_back(noise_tensor(p + "q_weight", "BF16", {1, kHidden}, seed));
    sh.groups.push_back(noise_tensor(p + "k_weight", "BF16", {1, kHidden}, seed));
    sh.groups.push_back(noise_tensor(p + "wkv.scale", "F8_E8M0", {2 * kHidden / 32, int64_t{hash_cols} * d / 32}, seed));
    // wkv.weight, embed.weight, q_weight, embed.scale, k_weight, wkv.scale
    sh.order = {{0, 0}, {1, 0}, {2, 0}, {1, 1}, {3, 0}, {4, 0}};
  }
  json weight_map = json::object();
  std::set<std::string> seen;
  int64_t total_bytes = 0;
  for (Shard& sh : shards) {
    for (const TensorGroup& g : sh.groups) {
      for (const TensorSpec& t : g.tensors) {
        if (!seen.insert(t.name).second)
          return invalid("tensor name " + t.name + " is used twice (do the --tensor-names collide with another tensor?)");
        weight_map[t.name] = sh.name;
      }
      sh.bytes += group_bytes(g);
    }
    total_bytes += sh.bytes;
  }

  json text = {{"model_type", "deepseek_v41_text"},
               {"hidden_size", kHidden},
               {"num_hidden_layers", n_layers},
               {"vocab_size", model_vocab},
               {"engram_layer_ids", layout.layer_ids},
               {"engram_num_embeddings", num_embeddings},
               {"engram_vocab_size", layout.vocab_size_per_order.front()},
               {"engram_max_ngram_size", layout.max_ngram},
               {"engram_n_heads", layout.heads_per_order},
               {"engram_head_dim", d},
               {"engram_compressed_vocab_size", compressed_vocab},
               {"engram_pad_token_id", opt.pad_token_id}};
  const json config = {{"architectures", {"DeepseekV41ForCausalLM"}},
                       {"model_type", "deepseek_v41"},
                       {"engram_offload_synthetic", {{"generator", kGenerator}, {"seed", seed}, {"layout", layout.name}}},
                       {"quantization_config",
                        {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"}, {"weight_block_size", {32, 32}}}},
                       {"text_config", text}};
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};

  // ---- into a temporary sibling, then renamed into place ----
  // Its owner record (sys/owner.hpp) comes first, as for a checkpoint's temp file: a writer killed by SIGKILL
  // leaves a directory that a sweep of this directory (host/sweep.hpp: the next create, engram cleanup --dir)
  // can tell from a live writer's and remove.
  std::string tmp;
  for (int attempt = 0;; ++attempt) {
    tmp = temp_sibling_name(dir);
    if (Status rec = sys::write_owner_record(tmp); !rec.is_ok()) {
      if (rec.sys_error() == EEXIST && attempt < 8) continue;
      return rec;
    }
    const Status s = sys::make_directory(tmp);
    if (s.is_ok()) break;
    (void)sys::remove_owner_record(tmp);
    if (s.sys_error() != EEXIST || attempt >= 8) return s;
  }
  bool committed = false;
  struct Cleanup {
    const std::string& tmp;
    bool& committed;
    ~Cleanup() {
      if (!committed) (void)sys::remove_tree(tmp);
      (void)sys::remove_owner_record(tmp);
    }
  } cleanup{tmp, committed};

  SafetensorsWriteOptions wo;
  wo.threads = opt.threads;
  wo.chunk_bytes = opt.chunk_bytes;
  wo.drop_page_cache = opt.drop_page_cache;
  wo.cancelled = opt.cancelled;
  int64_t written = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const bool last = s + 1 == shards.size();
    if (opt.on_progress)
      wo.on_progress = [&opt, &written, total_bytes, last](const TransferProgress& p) {
        TransferProgress q = p;
        q.done_bytes += written;
        q.total_bytes = total_bytes;
        q.final = p.final && last;
        opt.on_progress(q);
      };
    const Shard& sh = shards[s];
    const Status st = write_safetensors_file(tmp + "/" + sh.name, sh.groups, {{"format", "pt"}}, sh.order, wo);
    if (!st.is_ok()) return st.with_context("shard " + sh.name);
    written += sh.bytes;
  }
  ENGRAM_RETURN_IF_ERROR(sys::write_new_file(tmp + "/" + kModelConfigFile, config.dump(2) + "\n"));
  ENGRAM_RETURN_IF_ERROR(sys::write_new_file(tmp + "/" + kModelIndexFile, index.dump(2) + "\n"));
  if (!opt.tokenizer_json.empty()) ENGRAM_RETURN_IF_ERROR(copy_file(opt.tokenizer_json, tmp + "/" + kModelTokenizerFile));
  if (!opt.tokenizer_config_json.empty())
    ENGRAM_RETURN_IF_ERROR(copy_file(opt.tokenizer_config_json, tmp + "/tokenizer_config.json"));
  if (!opt.compression_table.empty()) {
    ENGRAM_RETURN_IF_ERROR(copy_file(opt.compression_table, tmp + "/" + kModelCompressionTableFile));
    ENGRAM_RETURN_IF_ERROR(copy_file(opt.compression_table + ".json", tmp + "/" + kModelCompressionTableFile + ".json"));
  }
  {
    ENGRAM_ASSIGN_OR_RETURN(const sys::File df, sys::open_directory(tmp));
    ENGRAM_RETURN_IF_ERROR(sys::fsync(df));
  }

  if (exists) {
    // Move the old directory aside, the new one in, then remove the old one; put it back on failure.
    const std::string old = temp_sibling_name(dir);
    ENGRAM_RETURN_IF_ERROR(sys::rename_path(dir, old, false));
    if (Status s = sys::rename_path(tmp, dir, false); !s.is_ok()) {
      (void)sys::rename_path(old, dir, false);
      return s;
    }
    committed = true;
    (void)sys::remove_tree(old);
  } else {
    ENGRAM_RETURN_IF_ERROR(sys::rename_path(tmp, dir, false));
    committed = true;
  }
  if (auto df = sys::open_directory(parent); df.is_ok()) (void)sys::fsync(*df);
  return Status::ok();
}

}  // namespace

Status write_synthetic_model_dir(const std::string& dir, const EngramLayout& layout,
                                 const SyntheticModelOptions& options) {
  std::string target = dir;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  try {
    const Status s = write_impl(target, layout, options);
    return s.is_ok() ? s : s.with_context("writing model directory " + dir);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "writing model directory " + dir + ": out of memory");
  }
}

}  // namespace engram::host
