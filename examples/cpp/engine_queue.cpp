// Prefetch queue: what a serving loop does with an engine (include/engram/prefetch_queue.hpp). Per decode step it
// calls begin_step, prepare(layer, ids) for every Engram layer as soon as the layer's ids are known (the lookups
// run on the queue while the model computes), consume(layer) where the layer needs its embeddings (the staging),
// and end_step. The engine is a create_local table of a small two-layer layout (synthetic rows); argv[1] picks the
// backend (cpu | cuda | auto, default cpu). Every staging row is checked against the scalar reference decoder, and the
// queue's timeline must hold one row per lookup with its times recorded.
// Exits 0 on success, 1 on a failure or mismatch, 77 when the asked-for backend cannot run on this machine.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engram/engine.hpp"
#include "engram/format.hpp"
#include "engram/prefetch_queue.hpp"
#include "engram/timeline.hpp"
#if ENGRAM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

int fail(const char* what, const engram::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  return s.code() == engram::Code::kUnsupported ? 77 : 1;
}

// The staging rows on the host: a CPU staging is host memory; a CUDA one is copied on the engine's main stream,
// where consume() made the copy wait for the layer's lookup.
bool staging_to_host(engram::Engine& e, const engram::StagingView& v, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(v.tokens) * static_cast<size_t>(v.heads) * static_cast<size_t>(v.d));
  if (!v.on_device) {
    std::copy(v.data, v.data + out.size(), out.begin());
    return true;
  }
#if ENGRAM_HAVE_CUDA
  auto stream = static_cast<cudaStream_t>(e.main_stream());
  return cudaMemcpyAsync(out.data(), v.data, out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream) ==
             cudaSuccess &&
         cudaStreamSynchronize(stream) == cudaSuccess;
#else
  (void)e;
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  engram::EngramLayout two_layers;  // Engram layers at model layers 1 and 3, orders 2..3 with 2 heads each
  two_layers.name = "example-queue";
  two_layers.layer_ids = {1, 3};
  two_layers.max_ngram = 3;
  two_layers.heads_per_order = 2;
  two_layers.vocab_size_per_order = {3000, 4000};
  two_layers.d = 64;
  if (auto s = two_layers.finalize(); !s.is_ok()) return fail("layout", s);
  const engram::EngramLayout* layout = &two_layers;
  engram::EngineOptions options;
  const std::string backend = argc > 1 ? argv[1] : "cpu";
  if (auto s = engram::set_engine_option(options, "backend", backend); !s.is_ok()) return fail("--backend", s);
  options.content.seed = 5;
  options.lookup_threads = 2;
  options.max_tokens = 8;
  auto engine = engram::Engine::create_local(*layout, options);
  if (!engine.is_ok()) return fail("Engine::create_local", engine.status());
  engram::Engine& e = **engine;
  engram::PrefetchQueue& queue = e.queue();

  const int heads = layout->heads(), d = layout->d, n_layers = layout->n_layers();
  const int64_t tokens = 3;
  const int steps = 4;
  int64_t rows = 0, bad = 0;
  std::vector<uint16_t> got, want(static_cast<size_t>(d));
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(n_layers));
  for (int step = 0; step < steps; ++step) {
    queue.begin_step(step);
    for (int li = 0; li < n_layers; ++li) {  // every layer's ids first: the lookups overlap what comes next
      const int64_t layer_rows = e.table().view(li).rows;
      auto& v = ids[static_cast<size_t>(li)];
      v.resize(static_cast<size_t>(tokens * heads));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<int64_t>((static_cast<uint64_t>(step) * 7919 + i * 131 + 17) % static_cast<uint64_t>(layer_rows));
      if (step == 1) v[0] = engram::kDeadId;  // a padding position: a zero row
      if (auto s = queue.prepare(li, v.data(), tokens); !s.is_ok()) return fail("PrefetchQueue::prepare", s);
    }
    for (int li = 0; li < n_layers; ++li) {
      auto staging = queue.consume(li);
      if (!staging.is_ok()) return fail("PrefetchQueue::consume", staging.status());
      if (staging->tokens != tokens || staging->heads != heads || staging->d != d)
        return std::fprintf(stderr, "staging shape [%lld][%d][%d], expected [%lld][%d][%d]\n",
                            static_cast<long long>(staging->tokens), staging->heads, staging->d,
                            static_cast<long long>(tokens), heads, d), 1;
      if (!staging_to_host(e, *staging, got)) return std::fprintf(stderr, "staging copy failed\n"), 1;
      const engram::TableView view = e.table().view(li);
      const auto& v = ids[static_cast<size_t>(li)];
      for (size_t p = 0; p < v.size(); ++p, ++rows) {
        if (v[p] < 0) {
          std::fill(want.begin(), want.end(), uint16_t{0});
        } else {
          engram::decode_row_reference(view.payload_of(v[p]), view.scales_of(v[p]), d, want.data());
        }
        for (int i = 0; i < d; ++i) bad += got[p * static_cast<size_t>(d) + static_cast<size_t>(i)] != want[static_cast<size_t>(i)];
      }
    }
    if (auto s = queue.end_step(); !s.is_ok()) return fail("PrefetchQueue::end_step", s);
  }

  const engram::Timeline& timeline = queue.timeline();
  const size_t want_rows = static_cast<size_t>(steps * n_layers);
  int unrecorded = 0;
  for (const engram::LayerTiming& t : timeline.rows())
    unrecorded += std::isnan(t.r_ns) || std::isnan(t.f_ns) || std::isnan(t.c_ns);
  const engram::LookupStats totals = queue.totals();
  std::printf("queue on %s: %d steps x %d layers, %lld rows (%lld dead), %zu timeline rows, staging %s\n",
              queue.backend_name(), steps, n_layers, static_cast<long long>(totals.rows),
              static_cast<long long>(totals.dead_rows), timeline.rows().size(),
              bad == 0 ? "matches the reference" : "MISMATCH");
  if (timeline.rows().size() != want_rows || unrecorded != 0)
    return std::fprintf(stderr, "timeline: %zu rows (want %zu), %d with a time not recorded\n", timeline.rows().size(),
                        want_rows, unrecorded), 1;
  if (totals.rows != rows) return std::fprintf(stderr, "totals: %lld rows, want %lld\n",
                                               static_cast<long long>(totals.rows), static_cast<long long>(rows)), 1;
  return bad == 0 ? 0 : 1;
}
