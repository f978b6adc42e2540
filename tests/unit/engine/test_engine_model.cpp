// A model directory as engine content: content_layout reads the layout from config.json, the engine places the
// table and streams the rows from the shards, and every lookup equals the lookup of an engine whose table holds the
// same synthetic rows (the generator's rows are synth_row of its seed), in both row layouts, on fresh seeds and
// poisoned outputs. A malformed directory fails create_local with the tensor named; the rows past the primes are
// not part of the table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "host/census.hpp"
#include "host/model_io.hpp"
#include "support/conformance.hpp"

namespace engram {
namespace {

namespace fs = std::filesystem;

class EngineModel : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = rng_();
    root_ = fs::temp_directory_path() / ("engram_engine_model_" + std::to_string(getpid()) + "_" + std::to_string(rng_() % 1000000007));
    fs::create_directories(root_);
    dir_ = (root_ / "model").string();
    layout_.name = "test";
    layout_.layer_ids = {2, 5};
    layout_.max_ngram = 3;
    layout_.heads_per_order = 2;
    layout_.vocab_size_per_order = {89, 89};
    layout_.d = 64;
    layout_.format = RowFormat::kFused;
    ASSERT_TRUE(layout_.finalize().is_ok());
    host::SyntheticModelOptions o;
    o.seed = seed_;
    o.extra_rows = 7;
    o.compressed_vocab_size = 1000;
    o.chunk_bytes = 4096;
    const Status s = host::write_synthetic_model_dir(dir_, layout_, o);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  void TearDown() override { fs::remove_all(root_); }

  static EngineOptions cpu_options(TableContent content) {
    EngineOptions o;
    o.backend = BackendKind::kCpu;
    o.content = std::move(content);
    o.max_tokens = 64;
    o.record_timeline = false;
    return o;
  }

  std::mt19937_64 rng_{std::random_device{}()};
  uint64_t seed_ = 0;
  fs::path root_;
  std::string dir_;
  EngramLayout layout_;
};

TEST_F(EngineModel, LookupsEqualTheSyntheticTableInBothRowLayouts) {
  for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit}) {
    SCOPED_TRACE(row_format_name(f));
    auto layout = content_layout(TableContent::model(dir_), f);
    ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
    ASSERT_EQ(layout->n_layers(), 2);
    EXPECT_EQ(layout->layer_ids, layout_.layer_ids);
    EXPECT_EQ(layout->head_rows, layout_.head_rows);  // the primes, not the tensors' rows (7 more)
    EXPECT_EQ(layout->format, f);

    int64_t progress_calls = 0, last_done = -1, total = 0;
    TableContent model = TableContent::model(dir_);
    model.threads = 2;
    model.on_progress = [&](int64_t done, int64_t all, double) {
      ++progress_calls;
      EXPECT_GE(done, last_done);
      last_done = done;
      total = all;
    };
    auto from_model = Engine::create_local(*layout, cpu_options(model));
    ASSERT_TRUE(from_model.is_ok()) << from_model.status().to_string();
    TableContent synthetic;
    synthetic.kind = TableContent::Kind::kSynthetic;
    synthetic.seed = seed_;
    auto from_seed = Engine::create_local(*layout, cpu_options(synthetic));
    ASSERT_TRUE(from_seed.is_ok()) << from_seed.status().to_string();
    if (progress_calls > 0) {
      EXPECT_EQ(last_done, total);
    }

    for (int li = 0; li < layout->n_layers(); ++li) {
      for (int64_t tokens : {int64_t{1}, int64_t{17}, int64_t{64}}) {
        const std::vector<int64_t> ids = test::conformance_ids(*layout, li, tokens, rng_);
        const size_t n = static_cast<size_t>(tokens * layout->heads() * layout->d);
        std::vector<uint16_t> a(n, 0xFFFF), b(n, 0x7FC1);
        ASSERT_TRUE((*from_model)->lookup(li, ids.data(), tokens, a.data()).is_ok());
        ASSERT_TRUE((*from_seed)->lookup(li, ids.data(), tokens, b.data()).is_ok());
        EXPECT_EQ(a, b) << "layer " << li << " tokens " << tokens;
        EXPECT_EQ(test::first_reference_mismatch((*from_model)->table().view(li), ids, a.data()), -1);
        bool nonzero = false;
        for (uint16_t v : a) nonzero = nonzero || (v != 0 && v != 0x8000);
        EXPECT_TRUE(nonzero) << "the rows were loaded";
      }
    }
  }
}

// Registration while the rows load (the default) and after them: the same rows, the censuses in protocol order, and
// the assembly's seconds in describe() (null only where a step did not run).
TEST_F(EngineModel, RegistrationDuringOrAfterTheLoadGivesTheSameTableAndCensuses) {
  auto layout = content_layout(TableContent::model(dir_), RowFormat::kFused);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  TableContent synthetic;
  synthetic.kind = TableContent::Kind::kSynthetic;
  synthetic.seed = seed_;
  auto reference = Engine::create_local(*layout, cpu_options(synthetic));
  ASSERT_TRUE(reference.is_ok()) << reference.status().to_string();
  for (bool during : {true, false}) {
    SCOPED_TRACE(during ? "during" : "after");
    EngineOptions o = cpu_options(TableContent::model(dir_));
    o.register_during_load = during;
    auto e = Engine::create_local(*layout, o);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    const nlohmann::json a = (*e)->describe()["assembly"];
    EXPECT_EQ(a["register_during_load"].get<bool>(), during);
    for (const char* k : {"place_s", "register_s", "load_s", "total_s"}) {
      ASSERT_TRUE(a[k].is_number()) << k << ": " << a.dump();
      EXPECT_GE(a[k].get<double>(), 0.0) << k;
    }
    EXPECT_GE(a["total_s"].get<double>(), a["place_s"].get<double>());
    const auto& cs = (*e)->censuses();
    ASSERT_GE(cs.size(), 2u);
    EXPECT_EQ(cs.front().point, host::CensusPoint::kAfterPlacement);
    EXPECT_EQ(cs.back().point, host::CensusPoint::kAfterLoad);
    for (int li = 0; li < layout->n_layers(); ++li) {
      const std::vector<int64_t> ids = test::conformance_ids(*layout, li, 33, rng_);
      const size_t n = static_cast<size_t>(33 * layout->heads() * layout->d);
      std::vector<uint16_t> got(n, 0xFFFF), want(n, 0x7FC1);
      ASSERT_TRUE((*e)->lookup(li, ids.data(), 33, got.data()).is_ok());
      ASSERT_TRUE((*reference)->lookup(li, ids.data(), 33, want.data()).is_ok());
      EXPECT_EQ(got, want) << "layer " << li;
    }
  }
  // A table handed in was placed and loaded elsewhere: those steps are null.
  auto over = Engine::over_table((*reference)->shared_table(), cpu_options(TableContent{}));
  ASSERT_TRUE(over.is_ok()) << over.status().to_string();
  EXPECT_TRUE((*over)->describe()["assembly"]["place_s"].is_null());
  EXPECT_TRUE((*over)->describe()["assembly"]["load_s"].is_null());
}

// A tensor-parallel rank's table reads only its rows [vocab_start, vocab_end) from the shards: its lookups equal
// those of the same rank's synthetic table (synth_row of the global row), for every rank of tp 2 and 3.
TEST_F(EngineModel, TensorParallelSlicesLoadTheirRowRange) {
  auto layout = content_layout(TableContent::model(dir_), RowFormat::kFused);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  for (int size : {2, 3}) {
    for (int rank = 0; rank < size; ++rank) {
      SCOPED_TRACE("tp " + std::to_string(rank) + " of " + std::to_string(size));
      EngineOptions om = cpu_options(TableContent::model(dir_));
      TableContent synthetic;
      synthetic.seed = seed_;
      EngineOptions os = cpu_options(synthetic);
      for (EngineOptions* o : {&om, &os}) {
        ASSERT_TRUE(set_engine_option(*o, "tp_size", std::to_string(size)).is_ok());
        ASSERT_TRUE(set_engine_option(*o, "tp_rank", std::to_string(rank)).is_ok());
      }
      auto a = Engine::create_local(*layout, om);
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      auto b = Engine::create_local(*layout, os);
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      const int staging = (*a)->staging_heads();
      for (int li = 0; li < layout->n_layers(); ++li) {
        const std::vector<int64_t> ids = test::conformance_ids(*layout, li, 32, rng_);
        const size_t n = static_cast<size_t>(32 * staging * layout->d);
        std::vector<uint16_t> x(n, 0xFFFF), y(n, 0x7FC1);
        ASSERT_TRUE((*a)->lookup(li, ids.data(), 32, x.data()).is_ok());
        ASSERT_TRUE((*b)->lookup(li, ids.data(), 32, y.data()).is_ok());
        EXPECT_EQ(x, y) << "layer " << li;
      }
    }
  }
}

TEST_F(EngineModel, ContentDescribesItselfAndSyntheticContentHasNoLayout) {
  EXPECT_EQ(TableContent::model(dir_).to_string(), "model " + dir_);
  TableContent synthetic;
  EXPECT_EQ(content_layout(synthetic, RowFormat::kFused).status().code(), Code::kInvalidArgument);
}

TEST_F(EngineModel, CustomTensorNamesAndBadNamesFailNamingTheTensor) {
  // The released names are the default; a name pattern that matches nothing is an error naming the tensor.
  TableContent bad = TableContent::model(dir_, "layers.{L}.engram.table.weight,layers.{L}.engram.table.scale");
  auto layout = content_layout(bad, RowFormat::kFused);
  ASSERT_FALSE(layout.is_ok());
  EXPECT_NE(layout.status().message().find("layers.2.engram.table.weight"), std::string::npos)
      << layout.status().to_string();
  auto e = Engine::create_local(layout_, cpu_options(bad));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("engram.table"), std::string::npos) << e.status().to_string();
}

TEST_F(EngineModel, ALayoutThatDisagreesWithTheModelIsRefused) {
  EngramLayout other = layout_;
  other.vocab_size_per_order = {97, 97};
  ASSERT_TRUE(other.finalize().is_ok());
  auto e = Engine::create_local(other, cpu_options(TableContent::model(dir_)));
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument) << e.status().to_string();
}

// Synthetic content written with a progress callback (the CLI's progress line) holds the same bytes as the plain
// fill, in both row layouts, and reports a non-decreasing byte count that ends at the table's bytes.
TEST(EngineSyntheticFill, ProgressReportingFillEqualsThePlainFill) {
  std::mt19937_64 rng{std::random_device{}()};
  for (RowFormat f : {RowFormat::kFused, RowFormat::kSplit}) {
    SCOPED_TRACE(row_format_name(f));
    const EngramLayout layout = test::conformance_layout(f);  // ~2 MiB: the fill reports in many chunks
    const uint64_t seed = rng();
    auto options = [&](bool report, int64_t* calls, int64_t* last, int64_t* total) {
      EngineOptions o;
      o.backend = BackendKind::kCpu;
      o.content = TableContent::synthetic_or_checkpoint(seed, "");
      o.content.threads = 2;
      o.max_tokens = 16;
      o.record_timeline = false;
      if (report)
        o.content.on_progress = [calls, last, total](int64_t done, int64_t all, double) {
          ++*calls;
          EXPECT_GE(done, *last);
          EXPECT_LE(done, all);
          *last = done;
          *total = all;
        };
      return o;
    };
    int64_t calls = 0, last = -1, total = 0;
    auto with = Engine::create_local(layout, options(true, &calls, &last, &total));
    ASSERT_TRUE(with.is_ok()) << with.status().to_string();
    auto plain = Engine::create_local(layout, options(false, nullptr, nullptr, nullptr));
    ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
    EXPECT_GT(calls, 2) << "the fill reported in one piece";
    EXPECT_EQ(last, total);
    int64_t bytes = 0;
    for (int li = 0; li < layout.n_layers(); ++li) {
      const TableSpan a = (*with)->table().span(li), b = (*plain)->table().span(li);
      ASSERT_EQ(a.rows, b.rows);
      const int64_t payload = f == RowFormat::kFused ? a.rows * a.stride_bytes : a.rows * a.d;
      EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(payload)), 0) << "layer " << li;
      if (f == RowFormat::kSplit) {
        EXPECT_EQ(std::memcmp(a.scales, b.scales, static_cast<size_t>(a.rows * (a.d / 32))), 0) << "layer " << li;
      }
      bytes += f == RowFormat::kFused ? payload : a.rows * (a.d + a.d / 32);
    }
    EXPECT_EQ(total, bytes);
    // Rows are synth_row of the seed (not only equal to each other): spot-check the last row of each layer.
    for (int li = 0; li < layout.n_layers(); ++li) {
      const TableSpan a = (*with)->table().span(li);
      std::vector<uint8_t> payload(static_cast<size_t>(a.d), 0xA5), scales(static_cast<size_t>(a.d / 32), 0xA5);
      synth_row(seed, li, a.rows - 1, a.d, payload.data(), scales.data());
      EXPECT_EQ(std::memcmp(a.payload_of(a.rows - 1), payload.data(), payload.size()), 0) << "layer " << li;
      EXPECT_EQ(std::memcmp(a.scales_of(a.rows - 1), scales.data(), scales.size()), 0) << "layer " << li;
    }
  }
}

}  // namespace
}  // namespace engram
