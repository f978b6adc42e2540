// Writing generated safetensors files (see safetensors_write.hpp). The header is built with
// nlohmann-json (keys sorted, as every writer of the project produced them), then the data section is
// reserved with fallocate so that a full disk fails before the first chunk rather than midway.
#include "host/safetensors_write.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "host/safetensors.hpp"
#include "sys/file.hpp"

namespace engram::host {
namespace {

Status invalid(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

struct WriteItem {
  size_t group;
  int64_t row_lo, row_hi;
};

}  // namespace

std::string temp_sibling_name(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  const std::filesystem::path t(target);
  const std::filesystem::path dir = t.has_parent_path() ? t.parent_path() : std::filesystem::path(".");
  return (dir / ("." + t.filename().string() + ".tmp-" + hex)).string();
}

Status write_safetensors_file(const std::string& path, std::span<const TensorGroup> groups,
                              const std::map<std::string, std::string>& metadata,
                              const std::vector<std::pair<size_t, size_t>>& data_order,
                              const SafetensorsWriteOptions& opt) {
  // Row bytes of every tensor, checks of the specs.
  std::vector<std::vector<int64_t>> row_bytes(groups.size());
  std::vector<int64_t> group_row_bytes(groups.size(), 0);
  std::set<std::string> names;
  size_t n_tensors = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].rows < 0) return invalid("tensor group " + std::to_string(g) + " has negative rows");
    for (const TensorSpec& t : groups[g].tensors) {
      const int elem = safetensors_dtype_bytes(t.dtype);
      if (elem == 0) return invalid("tensor " + t.name + ": dtype '" + t.dtype + "' is not a safetensors dtype");
      if (t.shape.empty() || t.shape[0] != groups[g].rows)
        return invalid("tensor " + t.name + ": shape[0] must be the group's " + std::to_string(groups[g].rows) + " rows");
      if (!names.insert(t.name).second) return invalid("tensor " + t.name + " appears twice");
      int64_t rb = elem;
      for (size_t k = 1; k < t.shape.size(); ++k) {
        if (t.shape[k] < 0) return invalid("tensor " + t.name + ": negative dimension");
        rb *= t.shape[k];
      }
      row_bytes[g].push_back(rb);
      group_row_bytes[g] += rb;
      ++n_tensors;
    }
  }
  std::vector<std::pair<size_t, size_t>> order = data_order;
  if (order.empty())
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t k = 0; k < groups[g].tensors.size(); ++k) order.emplace_back(g, k);
  if (order.size() != n_tensors) return invalid("data order lists " + std::to_string(order.size()) + " of " +
                                                std::to_string(n_tensors) + " tensors");

  // Header: tensors back to back in `order`.
  std::vector<std::vector<int64_t>> begin(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) begin[g].assign(groups[g].tensors.size(), -1);
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [g, k] : order) {
    if (g >= groups.size() || k >= groups[g].tensors.size() || begin[g][k] >= 0)
      return invalid("data order names a tensor that does not exist or names one twice");
    const TensorSpec& t = groups[g].tensors[k];
    const int64_t bytes = groups[g].rows * row_bytes[g][k];
    begin[g][k] = offset;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<uint8_t> head, encode_safetensors_header(header.dump()));
  const int64_t data_offset = static_cast<int64_t>(head.size());

  ENGRAM_ASSIGN_OR_RETURN(sys::File f, sys::create_new(path));
  bool done = false;
  struct Cleanup {
    sys::File& f;
    const std::string& path;
    bool& done;
    ~Cleanup() {
      if (!done) {
        (void)f.close();
        (void)sys::unlink_path(path);
      }
    }
  } cleanup{f, path, done};

  {
    const Status s = sys::allocate_file(f, data_offset + offset);
    if (!s.is_ok() && s.code() != Code::kUnsupported) return s;
  }
  ENGRAM_RETURN_IF_ERROR(sys::pwrite_full(f, head.data(), head.size(), 0));

  std::vector<WriteItem> items;
  std::vector<int64_t> item_bytes;
  size_t scratch = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (group_row_bytes[g] == 0) continue;
    const int64_t rows_per = std::max<int64_t>(1, std::max<int64_t>(opt.chunk_bytes, 1) / group_row_bytes[g]);
    for (int64_t lo = 0; lo < groups[g].rows; lo += rows_per) {
      const int64_t hi = std::min(groups[g].rows, lo + rows_per);
      items.push_back({g, lo, hi});
      item_bytes.push_back((hi - lo) * group_row_bytes[g]);
    }
    scratch = std::max(scratch, static_cast<size_t>(std::min(rows_per, groups[g].rows) * group_row_bytes[g]));
  }
  ChunkedRunOptions run;
  run.threads = resolve_threads(opt.threads, items.size());
  run.scratch_bytes = scratch;
  run.phase = "write";
  run.on_progress = opt.on_progress;
  ENGRAM_RETURN_IF_ERROR(run_chunked(item_bytes, run, [&](size_t i, uint8_t* buf) -> Status {
    if (opt.cancelled && opt.cancelled())
      return Status(Code::kIo, "write of " + path + " cancelled after " + std::to_string(i) + " of " +
                                   std::to_string(items.size()) + " chunks; the partial file is removed",
                    4 /* EINTR */);
    const WriteItem& it = items[i];
    const TensorGroup& grp = groups[it.group];
    const int64_t n = it.row_hi - it.row_lo;
    std::vector<uint8_t*> out;
    uint8_t* p = buf;
    for (int64_t rb : row_bytes[it.group]) {
      out.push_back(p);
      p += n * rb;
    }
    grp.fill(it.row_lo, it.row_hi, out);
    for (size_t k = 0; k < out.size(); ++k) {
      const int64_t len = n * row_bytes[it.group][k];
      if (len == 0) continue;
      const int64_t off = data_offset + begin[it.group][k] + it.row_lo * row_bytes[it.group][k];
      ENGRAM_RETURN_IF_ERROR(sys::pwrite_full(f, out[k], static_cast<size_t>(len), off));
      if (opt.drop_page_cache) {
        // Advisory: written pages are dirty until written back, and DONTNEED skips dirty pages.
        (void)sys::sync_range(f, off, len, true);
        (void)sys::fadvise(f, off, len, sys::Advice::kDontNeed);
      }
    }
    return Status::ok();
  }));
  ENGRAM_RETURN_IF_ERROR(sys::fsync(f));
  ENGRAM_RETURN_IF_ERROR(f.close());
  done = true;
  return Status::ok();
}

}  // namespace engram::host
