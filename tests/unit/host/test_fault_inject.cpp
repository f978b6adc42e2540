// Fault matrix: every hooked syscall that creating a table makes (memfd_create, open_shm, ftruncate,
// fstatvfs, mmap, mbind, fallocate, ...) is failed in turn with ENOMEM, ENOSPC and EPERM; each time
// the operation must return a clean Status (a code other than kInternal, a message naming the call)
// or succeed when the failing call is optional, and leave nothing behind: no descriptor, no mapping
// of an engram object, no table-sized anonymous mapping, no named file in /dev/shm.
// Also: a checkpoint that fails mid-load (truncated file, EIO from pread, corrupted header) gives an
// error and the shared table stays "not loaded".
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "support/table_options.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "host/checkpoint.hpp"
#include "host/group.hpp"
#include "sys/fault.hpp"
#include "unit/sys/resource_census.hpp"

using namespace engram;
using engram::hardening::ResourceCensus;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

struct PrivateDir {
  std::string path;
  explicit PrivateDir(const std::string& parent) {
    path = parent + "/engram-fault-" + std::to_string(getpid()) + "-" + std::to_string(rng()() % 1000000000);
    std::filesystem::create_directories(path);
    chmod(path.c_str(), 0700);
  }
  ~PrivateDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

constexpr int64_t kTableBytes = 48 << 20;  // whole model; each layer ~24 MiB
constexpr uint64_t kBigMapBytes = 16 << 20;  // above a thread stack (8 MiB), below one layer

struct Outcome {
  std::string wrapper;
  int err = 0;
  bool ok = false;
  Code code = Code::kOk;
  std::string message;
};

// Runs `op` once per hooked call it makes and per errno, failing that call; checks cleanliness.
void run_matrix(const std::string& what, const std::function<Status()>& op, const std::string& shm_dir,
                std::vector<Outcome>* outcomes) {
  // Warm-up run: allocator arenas, cached thread stacks and lazily read sysfs state settle here.
  ASSERT_TRUE(op().is_ok()) << what << ": the operation fails without any fault";
  sys::start_call_trace();
  ASSERT_TRUE(op().is_ok());
  const std::vector<std::string> calls = sys::stop_call_trace();
  ASSERT_FALSE(calls.empty()) << what << ": no hooked call";
  // Every hooked call asks under a name of the registry, so ENGRAM_FAULT can name it.
  for (const auto& c : calls) EXPECT_TRUE(sys::is_fault_point(c)) << what << ": hooked call '" << c << "' is no fault point";
  const ResourceCensus base = ResourceCensus::take(kBigMapBytes, shm_dir);
  for (size_t i = 0; i < calls.size(); ++i) {
    for (int err : {ENOMEM, ENOSPC, EPERM}) {
      sys::set_fault_at_call(i + 1, err);
      const Status s = op();
      const bool fired = !sys::fault_at_call_pending();
      sys::set_fault_at_call(0, 0);
      const ResourceCensus after = ResourceCensus::take(kBigMapBytes, shm_dir);
      const std::string where = what + ": call " + std::to_string(i + 1) + " (" + calls[i] + ") failing with " +
                                std::to_string(err);
      EXPECT_TRUE(fired) << where << ": the call sequence changed between runs";
      if (!s.is_ok()) {
        EXPECT_NE(s.code(), Code::kInternal) << where << ": " << s.to_string();
        EXPECT_FALSE(s.message().empty()) << where;
      }
      EXPECT_EQ(after.fds, base.fds) << where << ": descriptor leaked; " << after.to_string();
      EXPECT_EQ(after.engram_maps, base.engram_maps) << where << ": mapping of a table object leaked";
      EXPECT_EQ(after.big_maps, base.big_maps)
          << where << ": table-sized anonymous mapping leaked; new:" << after.new_big_maps(base);
      EXPECT_EQ(after.shm_files, base.shm_files) << where << ": named file left in " << shm_dir;
      outcomes->push_back({calls[i], err, s.is_ok(), s.code(), s.message()});
    }
  }
}

void print_outcomes(const std::string& what, const std::vector<Outcome>& outcomes) {
  // One line per (wrapper, errno): the docs/hardening.md table is built from these lines.
  std::set<std::string> seen;
  for (const auto& o : outcomes) {
    const std::string key = o.wrapper + "/" + std::to_string(o.err);
    if (!seen.insert(key).second) continue;
    std::printf("[fault] %s | %s=%s | %s\n", what.c_str(), o.wrapper.c_str(),
                o.err == ENOMEM ? "ENOMEM" : o.err == ENOSPC ? "ENOSPC" : "EPERM",
                o.ok ? "tolerated (ok)" : (std::string(code_name(o.code)) + ": " + o.message.substr(0, 140)).c_str());
  }
}

Result<EngramLayout> small_layout() { return make_preset_layout("v41-flash-mini", kTableBytes, RowFormat::kFused); }

std::function<Status()> create_op(const EngramLayout& layout, TableOptions o) {
  return [layout, o]() -> Status {
    auto t = HostTable::create(layout, o);
    if (!t.is_ok()) return t.status();
    // A table that was created must be whole: write and read its last row.
    const TableSpan sp = (*t)->span(layout.n_layers() - 1);
    sp.payload_of(sp.rows - 1)[0] = 0x42;
    if (sp.payload_of(sp.rows - 1)[0] != 0x42) return Status(Code::kInternal, "last row not writable");
    return Status::ok();
  };
}

}  // namespace

TEST(FaultInject, MemfdTableEveryCallEveryErrno) {
  auto layout = small_layout();
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  TableOptions o;
  o.prefault_threads = 2;
  std::vector<Outcome> out;
  run_matrix("memfd, placement none", create_op(*layout, o), "", &out);
  print_outcomes("HostTable::create memfd", out);
}

TEST(FaultInject, MemfdBindTableEveryCallEveryErrno) {
  auto layout = small_layout();
  ASSERT_TRUE(layout.is_ok());
  TableOptions o;
  test::set_opt(o, "placement", "bind:0");
  o.prefault_threads = 2;
  std::vector<Outcome> out;
  run_matrix("memfd, placement bind:0", create_op(*layout, o), "", &out);
  print_outcomes("HostTable::create memfd bind:0", out);
  // mbind is on the path of a bound table: its failure must be among the outcomes, as an error.
  bool saw_mbind = false;
  for (const auto& x : out)
    if (x.wrapper == "mbind") {
      saw_mbind = true;
      EXPECT_FALSE(x.ok) << "a refused mbind must fail the table (allow_fallback is off)";
    }
  EXPECT_TRUE(saw_mbind);
}

TEST(FaultInject, NamedShmTableEveryCallEveryErrno) {
  PrivateDir dir("/dev/shm");
  auto layout = small_layout();
  ASSERT_TRUE(layout.is_ok());
  TableOptions o;
  test::set_opt(o, "backing", "shm");
  o.shm_dir = dir.path;
  o.prefault_threads = 2;
  std::vector<Outcome> out;
  run_matrix("shm", create_op(*layout, o), dir.path, &out);
  print_outcomes("HostTable::create shm", out);
  EXPECT_EQ(hardening::count_dir_entries(dir.path), 0);
}

TEST(FaultInject, AnonThpTableEveryCallEveryErrno) {
  auto layout = small_layout();
  ASSERT_TRUE(layout.is_ok());
  TableOptions o;
  test::set_opt(o, "backing", "anon-thp");
  o.prefault_threads = 2;
  std::vector<Outcome> out;
  run_matrix("anon-thp", create_op(*layout, o), "", &out);
  print_outcomes("HostTable::create anon-thp", out);
}

TEST(FaultInject, PrivateAllocateMmapFailure) {
  auto layout = small_layout();
  ASSERT_TRUE(layout.is_ok());
  std::vector<Outcome> out;
  run_matrix("allocate", [&]() -> Status { return HostTable::allocate(*layout).status(); }, "", &out);
  print_outcomes("HostTable::allocate", out);
  for (const auto& x : out) EXPECT_FALSE(x.ok) << x.wrapper;
}

TEST(FaultInject, EnvironmentWildcardFailsEveryCall) {
  // ENGRAM_FAULT="*=ENOMEM" as a user would set it: the very first hooked call fails, cleanly.
  auto layout = small_layout();
  ASSERT_TRUE(layout.is_ok());
  const ResourceCensus base = ResourceCensus::take(kBigMapBytes);
  ASSERT_TRUE(sys::set_faults_from_spec("*=ENOMEM").is_ok());
  auto t = HostTable::create(*layout, TableOptions{});
  sys::clear_faults();
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kOutOfMemory) << t.status().to_string();
  const ResourceCensus after = ResourceCensus::take(kBigMapBytes);
  EXPECT_EQ(after.fds, base.fds);
  EXPECT_EQ(after.engram_maps, base.engram_maps);
}

// ---- checkpoint failing mid-load -------------------------------------------------------------------

namespace {

struct CheckpointFixture {
  PrivateDir dir{"/tmp"};
  EngramLayout layout;
  std::string path;
  uint64_t seed = rng()();
  void make() {
    auto l = make_preset_layout("v41-flash-mini", 4 << 20, RowFormat::kFused);
    ASSERT_TRUE(l.is_ok());
    layout = *l;
    path = dir.path + "/ck.safetensors";
    host::WriteOptions w;
    ASSERT_TRUE(host::write_synthetic_checkpoint(path, layout, seed, w).is_ok());
  }
  host::LoadOptions quiet() const {
    host::LoadOptions o;
    o.threads = 2;
    o.chunk_bytes = 64 << 10;
    return o;
  }
};

// Loads `ck` into a fresh leader group the way serve-table does (SharedTableGroup::load).
Status load_into_group(const CheckpointFixture& ck, bool* loaded) {
  TableOptions to;
  to.group = "fault-ck";
  auto t = HostTable::create(ck.layout, to);
  if (!t.is_ok()) return t.status();
  auto g = host::SharedTableGroup::lead(std::shared_ptr<HostTable>(std::move(*t)), "fault-ck", "");
  if (!g.is_ok()) return g.status();
  const auto opts = ck.quiet();
  const std::string path = ck.path;
  Status s = (*g)->load([&](HostTable& table) { return host::load_checkpoint(path, table, opts); });
  *loaded = (*g)->loaded();
  return s;
}

}  // namespace

TEST(FaultInject, CheckpointTruncatedMidPayloadIsErrorAndNotLoaded) {
  CheckpointFixture ck;
  ck.make();
  const auto size = std::filesystem::file_size(ck.path);
  // Cut somewhere inside the tensor data (past the header).
  std::filesystem::resize_file(ck.path, size / 2 + rng()() % (size / 4));
  bool loaded = true;
  const Status s = load_into_group(ck, &loaded);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(s.code() == Code::kInvalidArgument || s.code() == Code::kIo) << s.to_string();
  EXPECT_NE(s.message().find("checkpoint"), std::string::npos) << s.to_string();
  EXPECT_FALSE(loaded) << "a half-loaded table must not be marked loaded";
}

TEST(FaultInject, CheckpointReadErrorMidLoadIsErrorAndNotLoaded) {
  CheckpointFixture ck;
  ck.make();
  // Fail a pread after the first few chunks with EIO (a disk error half-way).
  sys::start_call_trace();
  bool loaded = false;
  ASSERT_TRUE(load_into_group(ck, &loaded).is_ok());
  const auto calls = sys::stop_call_trace();
  std::vector<size_t> preads;
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i] == "pread") preads.push_back(i + 1);
  ASSERT_GE(preads.size(), 3u) << "the load makes several reads";
  sys::set_fault_at_call(preads[preads.size() / 2], EIO);
  const Status s = load_into_group(ck, &loaded);
  sys::set_fault_at_call(0, 0);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kIo) << s.to_string();
  EXPECT_FALSE(loaded);
}

TEST(FaultInject, CheckpointCorruptedHeaderIsErrorBeforeAnyWrite) {
  CheckpointFixture ck;
  ck.make();
  // Overwrite bytes inside the JSON header with garbage.
  FILE* f = std::fopen(ck.path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 8 + 2 + static_cast<long>(rng()() % 32), SEEK_SET);
  const char junk[] = "\x01\xff{{]]";
  std::fwrite(junk, 1, sizeof junk - 1, f);
  std::fclose(f);
  bool loaded = true;
  const Status s = load_into_group(ck, &loaded);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_FALSE(loaded);
}
