// The one options table of the library (as mimalloc keeps one): every key set_engine_option and set_table_option
// accept is a row here, with its one-line help and a setter that parses the text with engram/options.hpp's parsers
// (or the small ones below) and stores the typed value. Rows of TableOptions fields are marked `table`:
// set_table_option accepts those and no other. The CLI, the Python keyword arguments and config files go through
// this table, and engine_option_keys() lists it, so an option is added by adding its field, its row here and its
// one user.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include "engram/engine.hpp"

#include "engine/harness.hpp"

namespace engram {
namespace {

std::string canonical_key(std::string_view key) {
  while (!key.empty() && key.front() == '-') key.remove_prefix(1);
  std::string k(key);
  for (char& c : k)
    if (c == '-') c = '_';
  return k;
}

Result<bool> parse_bool(const std::string& t) {
  if (t == "1" || t == "true" || t == "on" || t == "yes") return true;
  if (t == "0" || t == "false" || t == "off" || t == "no") return false;
  return Status(Code::kInvalidArgument, "'" + t + "': expected true/false (1/0, on/off, yes/no)");
}

Result<int64_t> parse_int(const std::string& t, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    return Status(Code::kInvalidArgument, "'" + t + "': expected an integer in [" + std::to_string(lo) + ", " +
                                              std::to_string(hi) + "]");
  return static_cast<int64_t>(v);
}

Result<uint64_t> parse_u64(const std::string& t) {
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
    return Status(Code::kInvalidArgument, "'" + t + "': expected a non-negative integer");
  errno = 0;
  const unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
  if (errno == ERANGE) return Status(Code::kInvalidArgument, "'" + t + "': out of range");
  return static_cast<uint64_t>(v);
}

Result<double> parse_double(const std::string& t, double lo, double hi, bool lo_open) {
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  const bool in = lo_open ? v > lo : v >= lo;
  if (t.empty() || *end != '\0' || !std::isfinite(v) || !in || v > hi)
    return Status(Code::kInvalidArgument, "'" + t + "': expected a number in " + (lo_open ? "(" : "[") +
                                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

// One option: `key` (canonical: '_' between words), an optional second spelling, the help line, whether it is a
// TableOptions field (set_table_option), whether engine_option_keys() lists it, and its setter. `heads` is the
// layout's head count where the caller knows it (head_shards needs it), else 0.
struct Row {
  const char* key;
  const char* alias;
  const char* help;
  bool table;
  bool listed;
  std::function<Status(EngineOptions&, const std::string&, int heads)> set;
};

template <typename T, typename F>
Status assign(Result<T> r, F&& store) {
  if (!r.is_ok()) return r.status();
  store(std::move(*r));
  return Status::ok();
}

using O = EngineOptions;
using S = const std::string&;

// Engine rows and table rows, built from plain setters.
Row row(const char* key, const char* help, std::function<Status(O&, S)> set) {
  return {key, nullptr, help, false, true, [set](O& o, S v, int) { return set(o, v); }};
}
Row table_row(const char* key, const char* help, std::function<Status(TableOptions&, S)> set) {
  return {key, nullptr, help, true, true, [set](O& o, S v, int) { return set(o.table, v); }};
}

const std::vector<Row>& rows() {
  static const std::vector<Row> table = [] {
    std::vector<Row> t = {
        // ---- table memory (TableOptions) ----
        table_row("backing", "memfd, shm, hugetlb, hugetlb-1g, anon-thp",
                  [](TableOptions& o, S v) { return assign(parse_backing(v), [&](BackingSpec b) { o.backing = b; }); }),
        table_row("placement",
                  "none, local, bind:N, preferred:N, interleave:N,M|all, weighted-interleave:N=w,..., replica-per-node",
                  [](TableOptions& o, S v) { return assign(parse_placement(v), [&](PlacementPolicy p) { o.placement = p; }); }),
        table_row("shard_placements", "one placement per head shard, ';'-separated", [](TableOptions& o, S v) {
          if (v.empty()) {
            o.shard_placements.clear();
            return Status::ok();
          }
          return assign(parse_placement_list(v), [&](std::vector<PlacementPolicy> p) { o.shard_placements = std::move(p); });
        }),
        table_row("shm_dir", "directory of named shm backings (a tmpfs)", [](TableOptions& o, S v) {
          if (v.empty()) return Status(Code::kInvalidArgument, "'': expected a directory");
          o.shm_dir = v;
          return Status::ok();
        }),
        table_row("group", "shared-group name carried in backing names", [](TableOptions& o, S v) {
          o.group = v;
          return Status::ok();
        }),
        table_row("prefault", "allocate every page at creation (true/false)",
                  [](TableOptions& o, S v) { return assign(parse_bool(v), [&](bool b) { o.prefault = b; }); }),
        table_row("prefault_threads", "threads that allocate the pages; 0 = one per CPU of the target nodes, at most 64",
                  [](TableOptions& o, S v) {
                    return assign(parse_int(v, 0, 4096), [&](int64_t x) { o.prefault_threads = static_cast<int>(x); });
                  }),
        table_row("prefault_fallocate",
                  "memfd/shm: fallocate each chunk before populating it (serialised on the inode lock)",
                  [](TableOptions& o, S v) { return assign(parse_bool(v), [&](bool b) { o.prefault_fallocate = b; }); }),
        table_row("shmem_huge_pages", "memfd/shm: MADV_HUGEPAGE on the table (2 MiB pages where shmem_enabled allows)",
                  [](TableOptions& o, S v) { return assign(parse_bool(v), [&](bool b) { o.shmem_huge_pages = b; }); }),
        table_row("allow_fallback", "a refused placement keeps the default policy (reported) instead of failing",
                  [](TableOptions& o, S v) { return assign(parse_bool(v), [&](bool b) { o.allow_fallback = b; }); }),
        table_row("home_node", "replica-per-node: the replica this process reads; -1 = its CPU's node",
                  [](TableOptions& o, S v) {
                    return assign(parse_int(v, -1, 1023), [&](int64_t x) { o.home_node = static_cast<int>(x); });
                  }),
        table_row("tp_size", "tensor-parallel ranks sharing the heads (vLLM's tp_size); the table holds one rank's heads",
                  [](TableOptions& o, S v) {
                    return assign(parse_int(v, 1, 65535), [&](int64_t x) { o.tp.size = static_cast<int>(x); });
                  }),
        table_row("tp_rank", "this tensor-parallel rank, 0..tp_size-1", [](TableOptions& o, S v) {
          return assign(parse_int(v, 0, 65534), [&](int64_t x) { o.tp.rank = static_cast<int>(x); });
        }),
        // head_shards needs the layout's heads: set_table_option(..., heads) takes it; not listed (an engine is
        // given its shards through TableOptions).
        {"head_shards", nullptr, "head shards: N (equal shards) or ranges a-b,c-d", true, false,
         [](O& o, S v, int heads) {
           if (heads <= 0) return Status(Code::kInvalidArgument, "head shards need the layout's head count");
           return assign(parse_head_shards(v, heads), [&](std::vector<HeadRange> h) {
             o.table.head_shards = h.size() > 1 ? std::move(h) : std::vector<HeadRange>{};
           });
         }},
        // ---- engine ----
        row("backend", "auto (cuda when usable, else cpu), cpu, cuda",
         [](O& o, S v) { return assign(parse_backend_kind(v), [&](BackendKind k) { o.backend = k; }); }),
        row("device", "CUDA ordinal; -1 = rank % visible devices",
         [](O& o, S v) { return assign(parse_int(v, -1, 1 << 16), [&](int64_t x) { o.device = static_cast<int>(x); }); }),
        row("register_during_load", "register the table with the backend while its content is written (true/false)",
         [](O& o, S v) { return assign(parse_bool(v), [&](bool b) { o.register_during_load = b; }); }),
        row("rank", "timeline rank",
         [](O& o, S v) { return assign(parse_int(v, 0, 1 << 20), [&](int64_t x) { o.rank = static_cast<int>(x); }); }),
        row("seed", "synthetic table content: synth_row(seed, layer, row)",
         [](O& o, S v) {
           return assign(parse_u64(v), [&](uint64_t x) {
             o.content.kind = TableContent::Kind::kSynthetic;
             o.content.seed = x;
           });
         }),
        row("checkpoint", "load the table from this safetensors checkpoint", [](O& o, S v) {
           if (v.empty()) return Status(Code::kInvalidArgument, "'': expected a file path");
           o.content.kind = TableContent::Kind::kCheckpoint;
           o.content.path = v;
           return Status::ok();
         }),
        row("model", "load the table from this Hugging Face model directory (config.json, index, shards)", [](O& o, S v) {
           if (v.empty()) return Status(Code::kInvalidArgument, "'': expected a model directory");
           o.content.kind = TableContent::Kind::kModel;
           o.content.path = v;
           return Status::ok();
         }),
        row("tensor_names", "model directory: Engram tensor names WEIGHT,SCALE with {L} for the layer id", [](O& o, S v) {
           o.content.tensor_names = v;
           return Status::ok();
         }),
        row("reader_node", "model directory: pin the shard readers to this NUMA node's CPUs; -1 = not pinned",
         [](O& o, S v) {
           return assign(parse_int(v, -1, 1 << 16), [&](int64_t x) { o.content.reader_node = static_cast<int>(x); });
         }),
        row("content", "zero (pages as allocated) or synthetic", [](O& o, S v) {
           if (v == "zero") o.content.kind = TableContent::Kind::kZero;
           else if (v == "synthetic") o.content.kind = TableContent::Kind::kSynthetic;
           else return Status(Code::kInvalidArgument, "'" + v + "': expected zero or synthetic (or set checkpoint / model)");
           return Status::ok();
         }),
        row("fast_path", "planner, plain, off",
         [](O& o, S v) { return assign(parse_fast_path_mode(v), [&](FastPathMode m) { o.fast_path = m; }); }),
        row("planner_learn", "CUDA planner: correct its costs with measured batch times (true/false, default true)",
         [](O& o, S v) { return assign(parse_bool(v), [&](bool b) { o.planner_learn = b; }); }),
        row("cache_size", "GPU hot-row cache per layer: bytes (256MiB), a share of the layer's table (5%), or off",
         [](O& o, S v) { return assign(parse_cache_size(v), [&](CacheSize c) { o.cache.size = c; }); }),
        row("cache_format", "fp8 or bf16",
         [](O& o, S v) { return assign(parse_cache_format(v), [&](CacheFormat f) { o.cache.format = f; }); }),
        row("cache_hbm_fraction", "all caches together take at most this share of the free HBM",
         [](O& o, S v) { return assign(parse_double(v, 0, 1, true), [&](double x) { o.cache.hbm_fraction = x; }); }),
        row("cache_warmup", "warm-up window of the cache in steps (>= 1)",
         [](O& o, S v) { return assign(parse_int(v, 1, 1 << 20), [&](int64_t x) { o.cache.warmup_steps = static_cast<int>(x); }); }),
        row("cache_update", "online updates: every=K,rows=M,slice=S or off",
         [](O& o, S v) { return assign(parse_cache_update(v, o.cache.update), [&](CacheUpdate u) { o.cache.update = u; }); }),
        row("cache_step_series", "record each step's cache probes and hits (a measurement mode: waits for the lookups "
                              "at each step's end)",
         [](O& o, S v) { return assign(parse_bool(v), [&](bool b) { o.cache.step_series = b; }); }),
        row("cache_profile", "fill the cache at start-up from this profile file (engram profile)", [](O& o, S v) {
           if (v.empty()) return Status(Code::kInvalidArgument, "'': expected a profile file");
           o.cache.profile_path = v;
           o.cache.profile.clear();
           return Status::ok();
         }),
        row("grid_fraction", "CUDA: grid cap of the prefetch queue's lookups, a fraction of the SMs in (0, 1] (default 0.5)",
            [](O& o, S v) { return assign(parse_grid_fraction(v), [&](GridCap c) { o.grid_cap = c; }); }),
        row("grid_blocks",
            "CUDA: grid cap of the prefetch queue's lookups in blocks, >= 1 (the last of grid_fraction / grid_blocks "
            "set is the cap)",
            [](O& o, S v) { return assign(parse_grid_blocks(v), [&](GridCap c) { o.grid_cap = c; }); }),
        {"lookup_threads", "threads", "CPU gather threads (0..4096); 0 = one per CPU this process may run on", false, true,
         [](O& o, S v, int) {
           return assign(parse_int(v, 0, 4096), [&](int64_t x) { o.lookup_threads = static_cast<int>(x); });
         }},
        row("checked", "validate every id before a lookup",
         [](O& o, S v) { return assign(parse_bool(v), [&](bool b) { o.checked = b; }); }),
        row("prefetch", "early or on_demand",
         [](O& o, S v) { return assign(parse_prefetch_mode(v), [&](PrefetchMode m) { o.prefetch = m; }); }),
        row("max_tokens", "largest batch (tokens) of one lookup",
         [](O& o, S v) { return assign(parse_int(v, 1, int64_t{1} << 24), [&](int64_t x) { o.max_tokens = x; }); }),
        row("layer_us", "synthetic compute per model layer in microseconds (harnesses); 0 = none",
         [](O& o, S v) { return assign(parse_double(v, 0, 1e7, false), [&](double x) { mutable_engine_harness(o).layer_us = x; }); }),
        row("record_timeline", "record the prefetch timeline",
         [](O& o, S v) { return assign(parse_bool(v), [&](bool b) { o.record_timeline = b; }); }),
        row("read_only", "group peers map the table read-only",
         [](O& o, S v) { return assign(parse_bool(v), [&](bool b) { o.read_only = b; }); }),
        row("step_timeout_ms", "timeout of every shared-group protocol step",
         [](O& o, S v) { return assign(parse_int(v, 1, int64_t{1} << 40), [&](int64_t x) { o.step_timeout_ms = x; }); }),
        row("load_timeout_ms", "how long peers wait for the leader's load",
         [](O& o, S v) { return assign(parse_int(v, 1, int64_t{1} << 40), [&](int64_t x) { o.load_timeout_ms = x; }); }),
    };
    return t;
  }();
  return table;
}

const Row* find_row(const std::string& k) {
  for (const Row& r : rows())
    if (k == r.key || (r.alias && k == r.alias)) return &r;
  return nullptr;
}

Status apply_row(const Row& r, EngineOptions& o, std::string_view key, const std::string& value, int heads) {
  Status s = r.set(o, value, heads);
  const std::string shown = key.empty() ? std::string("''") : std::string(key);
  return s.is_ok() ? s : Status(Code::kInvalidArgument, "option " + shown + ": " + s.message());
}

std::string known_keys() {
  std::string known;
  for (const Row& r : rows())
    if (r.listed) known += std::string(known.empty() ? "" : ", ") + r.key;
  return known;
}

}  // namespace

Status set_engine_option(EngineOptions& o, std::string_view key, const std::string& value) {
  const Row* r = find_row(canonical_key(key));
  if (r) return apply_row(*r, o, key, value, 0);
  const std::string shown = key.empty() ? std::string("''") : std::string(key);
  return Status(Code::kInvalidArgument, "unknown option " + shown + " (options: " + known_keys() + ")");
}

Status set_table_option(TableOptions& options, std::string_view key, const std::string& value, int heads) {
  const Row* r = find_row(canonical_key(key));
  if (!r || !r->table) return Status(Code::kNotFound, "not a table option: " + std::string(key));
  EngineOptions o;
  o.table = std::move(options);
  const Status s = apply_row(*r, o, key, value, heads);
  options = std::move(o.table);
  return s;
}

std::vector<std::pair<std::string, std::string>> engine_option_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Row& r : rows())
    if (r.listed) out.emplace_back(r.key, r.help);
  return out;
}

TableContent TableContent::synthetic_or_checkpoint(uint64_t seed, const std::string& checkpoint) {
  TableContent c;
  c.kind = checkpoint.empty() ? Kind::kSynthetic : Kind::kCheckpoint;
  c.seed = seed;
  c.path = checkpoint;
  return c;
}

TableContent TableContent::model(const std::string& dir, const std::string& names) {
  TableContent c;
  c.kind = Kind::kModel;
  c.path = dir;
  c.tensor_names = names;
  return c;
}

std::string TableContent::to_string() const {
  switch (kind) {
    case Kind::kZero: return "zero";
    case Kind::kSynthetic: return "synthetic(seed=" + std::to_string(seed) + ")";
    case Kind::kCheckpoint: return "checkpoint " + path;
    case Kind::kModel: return "model " + path;
  }
  return "?";
}

}  // namespace engram
