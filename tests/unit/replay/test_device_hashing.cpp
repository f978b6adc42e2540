// Device hashing in the decode and the serving replay, on the CPU: what each replay hands to an engine that hashes
// on the device gives exactly the id source's own ids when it is hashed as the device does it (the batch reference
// from look-back rows kept per slot, reset at new sequences, advanced after each step). Decode: a TextIdSource's
// raw token per slot and new-sequence flags, across document boundaries and sequence-length cuts. Serving: the
// chunks' raw tokens and look-back slots (ServingHashSlots) over a live schedule of chunked prefill and decode,
// slots reused by later requests. And where each replay hashes (auto, cpu, gpu) on a cpu engine: auto says why it
// stays on the CPU, gpu is refused naming why; the serving replay's step hooks run in place of its prepare.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <random>

#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"
#include "engram/engine.hpp"
#include "engram/layout.hpp"
#include "replay/device_hashing.hpp"
#include "replay/serving.hpp"
#include "replay/serving_hashing.hpp"
#include "replay/text_id_source.hpp"
#include "support/hash_support.hpp"

namespace engram {
namespace {

using testing::random_table;
using testing::random_token_file;

class DeviceHashing : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = make_preset_layout("tiny");
    ASSERT_TRUE(l.is_ok());
    layout_ = *l;
    auto h = NgramHasher::create(layout_, random_table(rng_, 300, 0.67), NgramHashOptions{.seed = static_cast<int64_t>(rng_() % 1000)});
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    hasher_.emplace(std::move(*h));
  }
  std::mt19937_64 rng_{std::random_device{}()};
  EngramLayout layout_;
  std::optional<NgramHasher> hasher_;
};

TEST_F(DeviceHashing, StepTokensHashedFromLookBackRowsGiveTheSourceIds) {
  const TokenFile tf = random_token_file(rng_, {37, 5, 120, 1, 64}, 300);
  const int seq_len = 3 + static_cast<int>(rng_() % 20);
  auto src = TextIdSource::create(*hasher_, tf, TextIdSourceOptions{.seq_len = seq_len});
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  const int batch = 1 + static_cast<int>(rng_() % 9);
  const int window = layout_.max_ngram - 1;
  const int heads = layout_.heads();
  std::vector<int64_t> lookback(static_cast<size_t>(batch * window), kDeadToken);
  std::vector<int32_t> qsl(static_cast<size_t>(batch + 1));
  for (int r = 0; r <= batch; ++r) qsl[static_cast<size_t>(r)] = r;
  std::vector<std::vector<int64_t>> ids;
  int64_t resets = 0;
  for (int64_t step = 0; step < 300; ++step) {
    ASSERT_TRUE((*src)->next_step(step, batch, ids).is_ok());
    const TextIdSource::StepTokens& st = (*src)->last_step_tokens();
    ASSERT_EQ(st.tokens.size(), static_cast<size_t>(batch));
    ASSERT_EQ(st.new_sequence.size(), static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      if (!st.new_sequence[static_cast<size_t>(r)]) continue;
      ++resets;
      std::fill_n(lookback.begin() + r * window, window, kDeadToken);
    }
    HashBatch b;
    b.n_requests = batch;
    b.max_tokens = batch;
    b.query_start_loc = qsl.data();
    b.tokens = st.tokens.data();
    b.lookback = lookback.data();
    b.lookback_rows = batch;
    std::vector<int64_t> out(static_cast<size_t>(layout_.n_layers() * batch * heads), -7);
    ASSERT_TRUE(hash_batch_reference(*hasher_, b, HashIdKind::kGlobalRow, out.data()).is_ok());
    for (int l = 0; l < layout_.n_layers(); ++l) {
      const std::vector<int64_t> got(out.begin() + l * batch * heads, out.begin() + (l + 1) * batch * heads);
      ASSERT_EQ(got, ids[static_cast<size_t>(l)]) << "step " << step << " layer " << l << " seq_len " << seq_len;
    }
    ASSERT_TRUE(update_lookback_reference(window, b, nullptr, lookback.data()).is_ok());
  }
  EXPECT_GT(resets, batch) << "the run crossed sequence starts after the first step";
}

TEST_F(DeviceHashing, AutoStaysOnTheCpuBackendAndGpuIsRefused) {
  EXPECT_EQ(parse_hash_place("gpu").value(), HashPlace::kGpu);
  EXPECT_EQ(parse_hash_place("auto").value(), HashPlace::kAuto);
  EXPECT_EQ(parse_hash_place("GPU").status().code(), Code::kInvalidArgument);
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.max_tokens = 8;
  o.record_timeline = false;
  auto e = Engine::create_local(layout_, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  auto src = TextIdSource::create(*hasher_, random_token_file(rng_, {50}, 300));
  ASSERT_TRUE(src.is_ok());
  DecodeReplayOptions base, wired;
  base.batch = 4;
  auto report = std::make_shared<DeviceHashingReport>();
  ASSERT_TRUE(wire_device_hashing(HashPlace::kAuto, **e, **src, base, wired, report).is_ok());
  EXPECT_EQ(report->used, HashPlace::kCpu);
  EXPECT_NE(report->note.find("cpu backend"), std::string::npos) << report->note;
  EXPECT_FALSE(wired.prepare_step);
  const Status refused = wire_device_hashing(HashPlace::kGpu, **e, **src, base, wired, report);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("cpu backend"), std::string::npos) << refused.to_string();
  // The engine's device-hashing entry points say the cpu backend has none.
  EXPECT_EQ((*e)->enable_device_hashing(*hasher_, 4).code(), Code::kUnsupported);
}


// A CPU engine for the serving replay of the tiny layout, with a schedule recorded by a live run of `n` requests.
struct ServingRig {
  std::unique_ptr<Engine> engine;
  std::vector<ServingRequest> requests;
  ServingOptions options;
  ServingSchedule schedule;
};

Status build_serving(const EngramLayout& layout, ServingIdSource& ids, int n, uint64_t seed, ServingRig& rig) {
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.max_tokens = 32;
  o.record_timeline = true;
  ENGRAM_ASSIGN_OR_RETURN(rig.engine, Engine::create_local(layout, o));
  WorkloadOptions w;
  w.rate_rps = 5000;  // arrivals within a few ms
  w.n_requests = n;
  w.seed = seed;
  w.prompt = *LengthDist::parse("uniform:1-45");
  w.output = *LengthDist::parse("uniform:1-7");
  ENGRAM_ASSIGN_OR_RETURN(rig.requests, make_requests(w, ids.text_tokens()));
  rig.options.model = *ModelShape::preset("tiny");
  rig.options.rates = {400, 4000, 5};
  rig.options.scheduler = {32, 12, 4, 64};
  ENGRAM_ASSIGN_OR_RETURN(ServingReport r, run_serving_live(layout, rig.requests, ids, rig.engine->queue(),
                                                            rig.engine->compute(), rig.options, &rig.schedule));
  (void)r;
  ids.reset();
  return Status::ok();
}

TEST_F(DeviceHashing, ServingChunksHashedFromTheirSlotsGiveTheTextSourceIds) {
  auto ids = make_text_serving_ids(*hasher_, random_token_file(rng_, {90, 3, 200, 41}, 300));
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  ServingRig rig;
  ASSERT_TRUE(build_serving(layout_, **ids, 14, rng_(), rig).is_ok());
  const int cap = serving_slots_needed(rig.schedule);
  EXPECT_LE(cap, rig.options.scheduler.max_running);
  EXPECT_LT(cap, 14) << "slots are reused by later requests";
  const int window = layout_.max_ngram - 1;
  EXPECT_LE(serving_max_step_tokens(rig.schedule), rig.options.scheduler.token_budget);
  ServingHashSlots slots(cap);
  std::vector<int64_t> lookback(static_cast<size_t>(cap * window), -5);  // garbage until a reset
  std::vector<int32_t> slot, qsl;
  std::vector<uint8_t> fresh;
  std::vector<int64_t> tokens, chunk;
  std::vector<std::vector<int64_t>> host;
  int64_t chunked = 0;
  for (size_t k = 0; k < rig.schedule.steps.size(); ++k) {
    const ScheduledStep& st = rig.schedule.steps[k];
    ASSERT_TRUE(slots.assign(st, slot, fresh).is_ok()) << "step " << k;
    ASSERT_EQ(std::set<int32_t>(slot.begin(), slot.end()).size(), slot.size()) << "step " << k << ": a slot twice";
    qsl.assign(1, 0);
    tokens.clear();
    host.assign(static_cast<size_t>(layout_.n_layers()), {});
    for (size_t c = 0; c < st.chunks.size(); ++c) {
      const ScheduledChunk& ch = st.chunks[c];
      ASSERT_EQ(fresh[c] != 0, ch.pos == 0);
      if (fresh[c]) std::fill_n(lookback.begin() + slot[c] * window, window, kDeadToken);
      const ServingRequest& r = rig.requests[static_cast<size_t>(ch.request)];
      ASSERT_TRUE((*ids)->raw_tokens(r, ch.pos, ch.tokens, chunk).is_ok());
      tokens.insert(tokens.end(), chunk.begin(), chunk.end());
      qsl.push_back(qsl.back() + static_cast<int32_t>(ch.tokens));
      chunked += ch.tokens > 1;
      ASSERT_TRUE((*ids)->append(r, ch.pos, ch.tokens, host).is_ok());
    }
    std::vector<std::vector<int64_t>> want;
    testing::reference_chunk_step(*hasher_, qsl, tokens, slot, cap, lookback, want);
    ASSERT_EQ(want, host) << "step " << k;
    slots.release_finished(st, rig.requests);
  }
  EXPECT_EQ(slots.live(), 0) << "every request gave its slot back";
  EXPECT_GT(chunked, 0) << "the schedule had prefill chunks";
  // A chunk that continues a request without a slot, and more requests than slots, are refused.
  ServingHashSlots one(1);
  ScheduledStep cont;
  cont.chunks.push_back({0, 5, 1, false});
  EXPECT_EQ(one.assign(cont, slot, fresh).code(), Code::kInternal);
  ScheduledStep two;
  two.chunks = {{0, 0, 3, true}, {1, 0, 3, true}};
  EXPECT_EQ(one.assign(two, slot, fresh).code(), Code::kInternal);
}

TEST_F(DeviceHashing, ServingReplayStaysOnTheCpuBackendAndItsHooksReplacePrepare) {
  auto text = make_text_serving_ids(*hasher_, random_token_file(rng_, {150}, 300));
  auto zipf = make_zipf_serving_ids(layout_, 1.1, 3);
  ASSERT_TRUE(text.is_ok() && zipf.is_ok());
  std::vector<int64_t> out;
  EXPECT_EQ((*zipf)->raw_tokens(ServingRequest{}, 0, 4, out).code(), Code::kUnsupported);
  EXPECT_EQ((*zipf)->hasher(), nullptr);
  ServingRig rig;
  ASSERT_TRUE(build_serving(layout_, **text, 6, rng_(), rig).is_ok());
  ServingOptions wired;
  auto report = std::make_shared<DeviceHashingReport>();
  ASSERT_TRUE(wire_serving_device_hashing(HashPlace::kAuto, *rig.engine, **text, rig.requests, 4, 32, rig.options,
                                          wired, report).is_ok());
  EXPECT_EQ(report->used, HashPlace::kCpu);
  EXPECT_NE(report->note.find("cpu backend"), std::string::npos) << report->note;
  EXPECT_FALSE(wired.prepare_step);
  EXPECT_FALSE(wired.host_ids_off_clock);
  const Status refused = wire_serving_device_hashing(HashPlace::kGpu, *rig.engine, **text, rig.requests, 4, 32,
                                                     rig.options, wired, report);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("cpu backend"), std::string::npos) << refused.to_string();

  // Hooks in place of the prepare: they see every step (warm-up ones unmeasured, with negative indices) and the
  // lookups they prepare are the ones the replay reports; the clock is stopped while the host hashes.
  ServingOptions hooked = rig.options;
  PrefetchQueue* q = &rig.engine->queue();
  int64_t prepared = 0, measured = 0, warm = 0, rows = 0;
  hooked.prepare_step = [&](const ScheduledStep& st, int64_t, const std::vector<std::vector<int64_t>>& host) -> Status {
    ++prepared;
    for (int li = 0; li < layout_.n_layers(); ++li) {
      ENGRAM_RETURN_IF_ERROR(q->prepare(li, host[static_cast<size_t>(li)].data(), st.tokens()));
      rows += st.tokens() * layout_.heads();
    }
    return Status::ok();
  };
  hooked.after_step = [&](const ScheduledStep&, int64_t index, bool m, const std::vector<std::vector<int64_t>>&) -> Status {
    (m ? measured : warm) += 1;
    EXPECT_EQ(m, index >= 0);
    return Status::ok();
  };
  hooked.host_ids_off_clock = true;
  auto rep = run_serving_recorded(layout_, rig.schedule, **text, *q, rig.engine->compute(), hooked);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(measured, rep->steps);
  EXPECT_EQ(warm, hooked.warmup_steps);
  EXPECT_EQ(prepared, rep->steps + hooked.warmup_steps);
  EXPECT_EQ(rep->rows_looked_up, rep->scheduled_tokens * layout_.heads() * layout_.n_layers());
  EXPECT_GE(rows, rep->rows_looked_up);
  EXPECT_EQ(rep->host_ids_ns.n, static_cast<size_t>(rep->steps));
  hooked.mode = PrefetchMode::kOnDemand;
  EXPECT_EQ(run_serving_recorded(layout_, rig.schedule, **text, *q, rig.engine->compute(), hooked).status().code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace engram
