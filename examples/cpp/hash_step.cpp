// Hashing a chunked step (include/engram/ngram_hash.hpp, hash_batch.hpp): an engine's batch of requests, each with
// its next tokens (a prefill chunk, a decode token, a speculative draft), hashed in one call from each request's
// look-back row, with DEAD positions (image-span tokens: kDeadToken) and the rollback of a rejected draft (the
// look-back advances past the accepted tokens only). Every step's ids are checked against hashing each request's
// sequence on its own (NgramHasher::hash_chunk on a SequenceState, SequenceState::rollback for the draft), and the
// look-back rows against the sequences' snapshots. With argv[1] = cuda (a package with the CUDA backend and a GPU)
// the first step is also hashed on the device by the engine (Engine::hash_chunks_and_prepare) and compared.
// Exits 0 on success, 1 on a failure or mismatch, 77 when the CUDA backend cannot run on this machine.
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "engram/engine.hpp"
#include "engram/hash_batch.hpp"
#include "engram/ngram_hash.hpp"

namespace {

using engram::kDeadToken;

int fail(const char* what, const engram::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  return s.code() == engram::Code::kUnsupported ? 77 : 1;
}

// One step of chunks: chunk r's tokens are chunks[r]; look-back row r is request r's.
struct Step {
  std::vector<int32_t> qsl{0};
  std::vector<int64_t> tokens;
  explicit Step(const std::vector<std::vector<int64_t>>& chunks) {
    for (const auto& c : chunks) {
      tokens.insert(tokens.end(), c.begin(), c.end());
      qsl.push_back(static_cast<int32_t>(tokens.size()));
    }
  }
  engram::HashBatch batch(std::vector<int64_t>& lookback, int window) const {
    engram::HashBatch b;
    b.n_requests = static_cast<int32_t>(qsl.size() - 1);
    b.max_tokens = static_cast<int64_t>(tokens.size());
    b.query_start_loc = qsl.data();
    b.tokens = tokens.data();
    b.lookback = lookback.data();
    b.lookback_rows = static_cast<int64_t>(lookback.size()) / window;
    return b;
  }
};

// ids of request r's chunk by its own sequence state (advanced past the chunk) == the step's ids of that request.
int compare_request(const engram::NgramHasher& h, engram::SequenceState& state, const std::vector<int64_t>& chunk,
                    const std::vector<int64_t>& step_ids, int64_t first, int64_t step_tokens) {
  const int heads = h.layout().heads(), n_layers = h.layout().n_layers();
  const size_t t = chunk.size();
  std::vector<int64_t> own(static_cast<size_t>(n_layers) * t * static_cast<size_t>(heads));
  if (auto s = h.hash_chunk(state, chunk, own); !s.is_ok()) return fail("NgramHasher::hash_chunk", s);
  int bad = 0;
  for (int l = 0; l < n_layers; ++l)
    for (size_t i = 0; i < t * static_cast<size_t>(heads); ++i)
      bad += own[static_cast<size_t>(l) * t * static_cast<size_t>(heads) + i] !=
             step_ids[static_cast<size_t>(l * step_tokens * heads + first * heads) + i];
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  auto layout = engram::make_preset_layout("tiny");
  if (!layout.is_ok()) return fail("layout", layout.status());
  engram::NgramHashOptions hash_options;
  hash_options.seed = 7;
  // Ids already compressed (a tokenizer's table would come from ngram_hasher_from_table_file / model_ngram_hasher).
  auto made = engram::NgramHasher::create_precompressed(*layout, 5000, hash_options);
  if (!made.is_ok()) return fail("NgramHasher::create_precompressed", made.status());
  const engram::NgramHasher& h = *made;
  const int heads = layout->heads(), n_layers = layout->n_layers(), window = layout->max_ngram - 1;

  // Two requests: look-back rows start DEAD (before the sequence start).
  std::vector<int64_t> lookback(static_cast<size_t>(2 * window), kDeadToken);
  std::vector<engram::SequenceState> seq{h.begin_sequence(), h.begin_sequence()};
  int bad = 0;
  auto run = [&](const std::vector<std::vector<int64_t>>& chunks, const std::vector<int32_t>& accepted,
                 std::vector<int64_t>* ids_out) -> int {
    const Step step(chunks);
    const engram::HashBatch b = step.batch(lookback, window);
    std::vector<int64_t> ids(static_cast<size_t>(n_layers) * step.tokens.size() * static_cast<size_t>(heads));
    if (auto s = engram::hash_batch_reference(h, b, engram::HashIdKind::kGlobalRow, ids.data()); !s.is_ok())
      return fail("hash_batch_reference", s);
    for (size_t r = 0; r < chunks.size(); ++r) {
      bad += compare_request(h, seq[r], chunks[r], ids, step.qsl[r], static_cast<int64_t>(step.tokens.size()));
      const int64_t rejected = static_cast<int64_t>(chunks[r].size()) - accepted[r];
      if (rejected > 0)
        if (auto s = seq[r].rollback(rejected); !s.is_ok()) return fail("SequenceState::rollback", s);
    }
    if (auto s = engram::update_lookback_reference(window, b, accepted.data(), lookback.data()); !s.is_ok())
      return fail("update_lookback_reference", s);
    // Each look-back row ends with its sequence's snapshot (its last min(position, N-1) tokens).
    for (size_t r = 0; r < chunks.size(); ++r) {
      const engram::SequenceSnapshot snap = seq[r].snapshot();
      for (size_t j = 0; j < snap.tail.size(); ++j)
        bad += lookback[r * static_cast<size_t>(window) + static_cast<size_t>(window) - snap.tail.size() + j] !=
               snap.tail[j];
    }
    if (ids_out) *ids_out = std::move(ids);
    return 0;
  };

  // Step 1: two prefill chunks, an image token (DEAD) inside the first.
  const std::vector<std::vector<int64_t>> prefill{{11, 12, kDeadToken, 14, 15}, {21, 22, 23}};
  std::vector<int64_t> prefill_ids;
  if (int rc = run(prefill, {5, 3}, &prefill_ids)) return rc;
  // The DEAD position hashes the all-pad n-grams of every order: the ids of a DEAD token that starts a sequence.
  for (int l = 0; l < n_layers; ++l) {
    std::vector<int64_t> pad_ids(static_cast<size_t>(heads));
    if (auto s = h.hash(std::vector<int64_t>{kDeadToken}, l, pad_ids); !s.is_ok()) return fail("NgramHasher::hash", s);
    const size_t step_tokens = prefill[0].size() + prefill[1].size(), dead_at = 2;  // chunk 0, position 2
    const size_t at = (static_cast<size_t>(l) * step_tokens + dead_at) * static_cast<size_t>(heads);
    for (int j = 0; j < heads; ++j) bad += prefill_ids[at + static_cast<size_t>(j)] != pad_ids[static_cast<size_t>(j)];
  }
  // Step 2: a decode token, and a 3-token speculative draft of which 1 is accepted (2 rolled back).
  if (int rc = run({{16}, {24, 25, 26}}, {1, 1}, nullptr)) return rc;
  // Step 3: hashed from the rolled-back look-back; the sequences agree only if the rollback did.
  if (int rc = run({{17}, {30}}, {1, 1}, nullptr)) return rc;
  std::printf("chunked steps with DEAD positions and a rolled-back draft: %s\n",
              bad == 0 ? "match the per-sequence hasher" : "MISMATCH");
  if (bad != 0) return 1;

  if (argc > 1 && std::string(argv[1]) == "cuda") {
    engram::EngineOptions options;
    options.backend = engram::BackendKind::kCuda;
    auto engine = engram::Engine::create_local(*layout, options);
    if (!engine.is_ok()) return fail("Engine::create_local", engine.status());
    engram::Engine& e = **engine;
    if (auto s = e.enable_device_hashing(h, 2, 16); !s.is_ok()) return fail("Engine::enable_device_hashing", s);
    const Step step(prefill);
    const std::vector<int32_t> counts{5, 3}, slots{0, 1};
    const std::vector<uint8_t> new_sequence{1, 1};
    e.queue().begin_step(0);
    if (auto s = e.hash_chunks_and_prepare(step.tokens.data(), counts.data(), slots.data(), new_sequence.data(), 2);
        !s.is_ok())
      return fail("Engine::hash_chunks_and_prepare", s);
    for (int li = 0; li < n_layers; ++li)
      if (auto st = e.queue().consume(li); !st.is_ok()) return fail("PrefetchQueue::consume", st.status());
    if (auto s = e.queue().end_step(); !s.is_ok()) return fail("PrefetchQueue::end_step", s);
    auto device = e.last_device_hash(/*with_ids=*/true);
    if (!device.is_ok()) return fail("Engine::last_device_hash", device.status());
    int64_t wrong = 0;
    for (int l = 0; l < n_layers; ++l) {
      const auto& got = device->ids[static_cast<size_t>(l)];
      for (size_t i = 0; i < got.size(); ++i)
        wrong += got[i] != prefill_ids[static_cast<size_t>(l) * step.tokens.size() * static_cast<size_t>(heads) + i];
    }
    std::printf("device hashing of the prefill step: %s (%llu kernel errors)\n",
                wrong == 0 ? "matches the reference" : "MISMATCH", static_cast<unsigned long long>(device->errors));
    if (wrong != 0 || device->errors != 0) return 1;
  }
  return 0;
}
