// Description: hot-row profiles (src/replay/hot_profile): compute_hot_profile counts exactly the ids a
// brute-force hash of each sequence gives (per layer, hottest first, ties by id, --top / --min-count keep
// lookups and distinct of all ids); a written profile reads back identical; a truncated, over-long or corrupt
// file (bad header, unsorted records, ids out of range, duplicates) is a clear kInvalidArgument; the held-out
// split is deterministic and disjoint from the rest; a profile is checked against a layout.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engram/ngram_hash.hpp"
#include "engram/layout.hpp"
#include "host/hot_profile.hpp"

namespace engram::host {
namespace {

CompressionTable random_table(std::mt19937_64& rng, int64_t vocab) {
  CompressionTable t;
  t.tokenizer = "test";
  uint32_t next = 0;
  for (int64_t i = 0; i < vocab; ++i) t.canonical.push_back(next == 0 || rng() % 3 ? next++ : static_cast<uint32_t>(rng() % next));
  t.compressed_vocab = next;
  return t;
}

// Zipf-ish token stream over a small vocabulary, so that ids repeat.
TokenFile random_tokens(std::mt19937_64& rng, const std::vector<int64_t>& doc_sizes, int64_t vocab) {
  TokenFile tf;
  tf.path = "mem.tokens";
  tf.tokenizer = "test";
  tf.vocab_size = vocab;
  int64_t at = 0;
  for (int64_t n : doc_sizes) {
    tf.documents.push_back({"/doc/" + std::to_string(tf.documents.size()) + ".txt", at, n});
    for (int64_t i = 0; i < n; ++i) tf.ids.push_back(static_cast<uint32_t>((rng() % 7) * (rng() % 7) % vocab));
    at += n;
  }
  return tf;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("engram_test_hot_profile_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

class HotProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = make_preset_layout("tiny");
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    layout_ = *l;
    layout_.layer_ids = {1, 5};  // two Engram layers: per-layer multipliers differ
    ASSERT_TRUE(layout_.finalize().is_ok());
    auto h = NgramHasher::create(layout_, random_table(rng_, 50), NgramHashOptions{.seed = 7});
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    hasher_.emplace(std::move(*h));
    tokens_ = random_tokens(rng_, {40, 1, 95, 17, 60}, 50);
  }
  // Brute force: every sequence (document cut every seq_len tokens) hashed alone, ids counted in a map.
  std::map<int64_t, int64_t> brute(int li, int64_t seq_len, const std::vector<int64_t>& docs) {
    std::map<int64_t, int64_t> m;
    for (int64_t d : docs) {
      const auto& doc = tokens_.documents[static_cast<size_t>(d)];
      for (int64_t s = doc.first_token; s < doc.first_token + doc.token_count; s += seq_len) {
        const int64_t e = std::min(s + seq_len, doc.first_token + doc.token_count);
        std::vector<int64_t> seq(tokens_.ids.begin() + s, tokens_.ids.begin() + e);
        std::vector<int64_t> out(seq.size() * static_cast<size_t>(layout_.heads()));
        EXPECT_TRUE(hasher_->hash(seq, li, out).is_ok());
        for (int64_t id : out) ++m[id];
      }
    }
    return m;
  }
  std::mt19937_64 rng_{20261129};
  EngramLayout layout_;
  std::optional<NgramHasher> hasher_;
  TokenFile tokens_;
};

TEST_F(HotProfileTest, CountsMatchBruteForce) {
  HotProfileOptions o;
  o.seq_len = 16;
  o.seed = 7;
  auto p = compute_hot_profile(*hasher_, {{&tokens_, {}}}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  ASSERT_EQ(static_cast<int>(p->layers.size()), layout_.n_layers());
  EXPECT_EQ(p->tokens, static_cast<int64_t>(tokens_.ids.size()));
  EXPECT_EQ(p->seed, 7);
  ASSERT_EQ(p->sources.size(), 1u);
  EXPECT_EQ(p->sources[0].documents, 5);
  EXPECT_TRUE(check_hot_profile_layout(*p, layout_).is_ok());
  for (int li = 0; li < layout_.n_layers(); ++li) {
    const auto m = brute(li, 16, {0, 1, 2, 3, 4});
    const auto& l = p->layers[static_cast<size_t>(li)];
    EXPECT_EQ(l.layer_id, layout_.layer_ids[static_cast<size_t>(li)]);
    EXPECT_EQ(l.rows, layout_.rows(li));
    EXPECT_EQ(l.distinct, static_cast<int64_t>(m.size()));
    EXPECT_EQ(l.lookups, static_cast<int64_t>(tokens_.ids.size()) * layout_.heads());
    ASSERT_EQ(l.id_counts.size(), m.size());
    for (size_t i = 0; i < l.id_counts.size(); ++i) {
      const auto [id, c] = l.id_counts[i];
      ASSERT_TRUE(m.count(id)) << id;
      EXPECT_EQ(c, m.at(id)) << "id " << id;
      if (i > 0) {
        const auto [pid, pc] = l.id_counts[i - 1];
        EXPECT_TRUE(pc > c || (pc == c && pid < id)) << "record " << i << " not hottest first";
      }
    }
    // Some id repeats (the stream is skewed), so the order is not trivial.
    EXPECT_GT(l.id_counts.front().second, 1);
    const auto hot = p->hot_ids(li);
    ASSERT_EQ(hot.size(), l.id_counts.size());
    EXPECT_EQ(hot.front(), l.id_counts.front().first);
    EXPECT_NEAR(p->coverage_of_top(li, static_cast<int64_t>(hot.size())), 1.0, 1e-12);
    EXPECT_NEAR(p->coverage_of_top(li, 1), static_cast<double>(l.id_counts[0].second) / static_cast<double>(l.lookups), 1e-12);
  }
  EXPECT_TRUE(p->hot_ids(99).empty());
  EXPECT_TRUE(std::isnan(p->coverage_of_top(-1, 3)));
}

TEST_F(HotProfileTest, SelectedDocumentsAndTruncation) {
  HotProfileOptions o;
  o.seq_len = 0;  // documents only
  o.top = 5;
  o.min_count = 2;
  auto p = compute_hot_profile(*hasher_, {{&tokens_, {2, 4}}}, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->tokens, 95 + 60);
  for (int li = 0; li < layout_.n_layers(); ++li) {
    const auto m = brute(li, 1 << 30, {2, 4});
    const auto& l = p->layers[static_cast<size_t>(li)];
    EXPECT_EQ(l.distinct, static_cast<int64_t>(m.size()));  // all ids, also those left out
    EXPECT_EQ(l.lookups, (95 + 60) * int64_t{layout_.heads()});
    EXPECT_LE(l.id_counts.size(), 5u);
    for (const auto& [id, c] : l.id_counts) {
      EXPECT_GE(c, 2);
      EXPECT_EQ(c, m.at(id));
    }
  }
  EXPECT_FALSE(compute_hot_profile(*hasher_, {{&tokens_, {5}}}, o).is_ok());  // document out of range
  o.min_count = 0;
  EXPECT_EQ(compute_hot_profile(*hasher_, {{&tokens_, {}}}, o).status().code(), Code::kInvalidArgument);
}

TEST_F(HotProfileTest, RoundTrip) {
  auto p = compute_hot_profile(*hasher_, {{&tokens_, {}}}, {});
  ASSERT_TRUE(p.is_ok());
  p->info = {{"holdout", {{"fraction", 0.5}, {"documents", {1, 3}}}}};
  const std::string path = temp_path("rt.profile");
  ASSERT_TRUE(write_hot_profile(path, *p).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto q = read_hot_profile(path);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->layout_name, p->layout_name);
  EXPECT_EQ(q->heads, p->heads);
  EXPECT_EQ(q->tokens, p->tokens);
  EXPECT_EQ(q->seq_len, p->seq_len);
  EXPECT_EQ(q->info, p->info);
  ASSERT_EQ(q->sources.size(), 1u);
  EXPECT_EQ(q->sources[0].path, "mem.tokens");
  ASSERT_EQ(q->layers.size(), p->layers.size());
  for (size_t i = 0; i < p->layers.size(); ++i) {
    EXPECT_EQ(q->layers[i].layer_id, p->layers[i].layer_id);
    EXPECT_EQ(q->layers[i].rows, p->layers[i].rows);
    EXPECT_EQ(q->layers[i].lookups, p->layers[i].lookups);
    EXPECT_EQ(q->layers[i].distinct, p->layers[i].distinct);
    EXPECT_EQ(q->layers[i].id_counts, p->layers[i].id_counts);
  }
  std::filesystem::remove(path);
}

// The reader takes the file in pieces: a header longer than its first read (many sources) and more records than one
// read of the body (1 MiB) come back exactly; parse_hot_profile on the same bytes gives the same profile.
TEST_F(HotProfileTest, LongHeaderAndManyRecordsRoundTrip) {
  auto p = compute_hot_profile(*hasher_, {{&tokens_, {}}}, {});
  ASSERT_TRUE(p.is_ok());
  for (int i = 0; i < 3000; ++i) p->sources.push_back({"corpus/part-" + std::string(40, 'x') + std::to_string(i), 1, 1});
  HotProfileLayer& l = p->layers[0];
  const int64_t n = 150000;  // > 65,536 records per read
  l.rows = std::max<int64_t>(l.rows, 4 * n);
  l.id_counts.clear();
  std::vector<int64_t> ids(static_cast<size_t>(l.rows));
  for (int64_t i = 0; i < l.rows; ++i) ids[static_cast<size_t>(i)] = i;
  std::shuffle(ids.begin(), ids.end(), rng_);
  ids.resize(static_cast<size_t>(n));
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (auto& c : counts) c = 1 + static_cast<int64_t>(rng_() % 1000);
  std::sort(counts.rbegin(), counts.rend());
  for (int64_t i = 0; i < n; ++i) l.id_counts.emplace_back(ids[static_cast<size_t>(i)], counts[static_cast<size_t>(i)]);
  std::stable_sort(l.id_counts.begin(), l.id_counts.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  l.lookups = 0;
  for (const auto& [id, c] : l.id_counts) l.lookups += c;
  l.distinct = n;
  const std::string path = temp_path("long.profile");
  ASSERT_TRUE(write_hot_profile(path, *p).is_ok());
  const std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.find('\n'), size_t{64} << 10) << "the header must be longer than the reader's first piece";
  auto q = read_hot_profile(path);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  auto m = parse_hot_profile(path, bytes);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(q->sources.size(), p->sources.size());
  EXPECT_EQ(q->sources.back().path, p->sources.back().path);
  ASSERT_EQ(q->layers.size(), p->layers.size());
  for (size_t i = 0; i < p->layers.size(); ++i) {
    EXPECT_EQ(q->layers[i].id_counts, p->layers[i].id_counts) << "layer " << i;
    EXPECT_EQ(m->layers[i].id_counts, p->layers[i].id_counts) << "layer " << i;
  }
  std::filesystem::remove(path);
}

// A repeated id is refused whichever way it is found: a bit per row (rows few against the records) or a sorted copy
// (rows far more than the records).
TEST_F(HotProfileTest, RepeatedIdRefusedForSmallAndHugeTables) {
  for (const int64_t rows : {int64_t{1000}, int64_t{1} << 40}) {
    HotProfile p;
    p.layout_name = "t";
    p.heads = 1;
    HotProfileLayer l;
    l.layer_id = 1;
    l.rows = rows;
    l.id_counts = {{7, 9}, {500, 5}, {3, 2}, {7, 1}};
    l.lookups = 17;
    l.distinct = 4;
    p.layers.push_back(l);
    const std::string path = temp_path("dup.profile");
    const Status s = write_hot_profile(path, p);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << "rows " << rows;
    EXPECT_NE(s.message().find("id 7 appears twice"), std::string::npos) << s.message();
    p.layers[0].id_counts.back().first = 8;  // unique again: accepted and read back
    ASSERT_TRUE(write_hot_profile(path, p).is_ok()) << "rows " << rows;
    auto q = read_hot_profile(path);
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    EXPECT_EQ(q->layers[0].id_counts, p.layers[0].id_counts);
    std::filesystem::remove(path);
  }
}

TEST_F(HotProfileTest, TruncatedAndCorruptFilesAreClearErrors) {
  auto p = compute_hot_profile(*hasher_, {{&tokens_, {}}}, {});
  ASSERT_TRUE(p.is_ok());
  const std::string path = temp_path("bad.profile");
  ASSERT_TRUE(write_hot_profile(path, *p).is_ok());
  const std::string good = read_bytes(path);
  const size_t nl = good.find('\n');
  ASSERT_NE(nl, std::string::npos);
  auto expect_bad = [&](const std::string& bytes, const std::string& needle) {
    write_bytes(path, bytes);
    auto r = read_hot_profile(path);
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  };
  expect_bad(good.substr(0, good.size() - 5), "truncated");
  expect_bad(good.substr(0, nl + 1 + 16), "truncated");
  expect_bad(good.substr(0, nl / 2), "no header line");
  expect_bad(good + "xx", "after the last record");
  expect_bad("{\"format\": \"engram-tokens\"}\n", "not an 'engram-hot-profile' file");
  expect_bad("not json\n", "not a JSON object");
  {
    std::string b = good;
    const size_t at = b.find("\"format_version\":1");
    ASSERT_NE(at, std::string::npos);
    b.replace(at, 18, "\"format_version\":9");
    expect_bad(b, "unsupported format_version 9");
  }
  {
    // A header integer written as a number past int64 (a float to the parser) is refused, not cast.
    std::string b = good;
    const size_t at = b.find("\"seq_len\":");
    ASSERT_NE(at, std::string::npos);
    b.insert(at + 10, "1e30,\"x\":");
    expect_bad(b, "seq_len");
  }
  // Corrupt records: swap the first two (unsorted), an id out of range, a zero count, a duplicate id.
  auto rec = [&](size_t i) { return nl + 1 + 16 * i; };
  {
    std::string b = good;
    std::string r0 = b.substr(rec(0), 16), r1 = b.substr(rec(1), 16);
    b.replace(rec(0), 16, r1);
    b.replace(rec(1), 16, r0);
    expect_bad(b, "not hottest first");
  }
  {
    std::string b = good;
    const int64_t big = int64_t{1} << 50;
    std::memcpy(b.data() + rec(0), &big, 8);
    expect_bad(b, "outside [0,");
  }
  {
    std::string b = good;
    const size_t last = rec(p->layers[0].id_counts.size() - 1);
    const int64_t zero = 0;
    std::memcpy(b.data() + last + 8, &zero, 8);
    expect_bad(b, "count 0");
  }
  {
    std::string b = good;
    const size_t n = p->layers[0].id_counts.size();
    ASSERT_GE(n, 3u);
    // The last record gets the id of the first: order by count still holds, the id repeats.
    std::memcpy(b.data() + rec(n - 1), b.data() + rec(0), 8);
    write_bytes(path, b);
    auto r = read_hot_profile(path);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  std::filesystem::remove(path);
  EXPECT_EQ(read_hot_profile(path).status().code(), Code::kNotFound);
  // The writer refuses a profile that breaks the rules.
  HotProfile q = *p;
  std::swap(q.layers[0].id_counts[0], q.layers[0].id_counts.back());
  EXPECT_EQ(write_hot_profile(path, q).code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(HotProfileTest, LayoutMismatchIsAnError) {
  auto p = compute_hot_profile(*hasher_, {{&tokens_, {}}}, {});
  ASSERT_TRUE(p.is_ok());
  EngramLayout other = layout_;
  other.vocab_size_per_order[0] += 100;
  ASSERT_TRUE(other.finalize().is_ok());
  const Status st = check_hot_profile_layout(*p, other);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("does not match"), std::string::npos) << st.message();
}

TEST_F(HotProfileTest, HoldoutSplitIsDeterministic) {
  TokenFile many = random_tokens(rng_, std::vector<int64_t>(200, 3), 50);
  const auto a = holdout_documents(many, 0.5, 1);
  const auto b = holdout_documents(many, 0.5, 1);
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 60u);  // ~100 of 200
  EXPECT_LT(a.size(), 140u);
  EXPECT_NE(a, holdout_documents(many, 0.5, 2));
  EXPECT_TRUE(holdout_documents(many, 0.0, 1).empty());
  EXPECT_EQ(holdout_documents(many, 1.0, 1).size(), 200u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
}

}  // namespace
}  // namespace engram::host
