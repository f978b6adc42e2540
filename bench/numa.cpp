// `engram bench numa`: the CPU node x memory node matrices of Intel MLC (rows = CPU node, columns = memory
// node), measured on memory placed by the project's own placement code and checked by census before timing:
//   - sequential read bandwidth, one thread and all threads of the CPU node (each thread streams its slice
//     with 8-byte loads summed into a register; bytes counted = buffer bytes read; time from the start signal
//     to the last thread's end);
//   - dependent-load latency: a pointer chase over a random cyclic permutation (Sattolo) of 64-B slots of the
//     whole buffer (working set >> LLC), one thread; the sample is the mean ns per hop of one chunk of hops,
//     so p99 is over chunks;
//   - random 256-B gather rate (the CPU lookup's ceiling): all threads of the CPU node copy 256-B rows at
//     uniform random 256-B-aligned offsets into a private buffer; rows/s and GB/s (rows x 256 B).
// Memory: one memfd per memory node, `bind:<m>` applied before the first page exists and every page allocated
// (host::create_placed_backings, protocol step 2), then host::take_census must find >= 99% of the pages on
// node m (else the cell is n/a with the census in the notes: a number for the wrong node is worse than none).
// Threads are pinned to the CPUs of the CPU node (sys::ScopedAffinity). Every (CPU node, memory node) pair is
// one variant of an interleaved loop (measure.hpp), so drift hits all cells alike.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/measure.hpp"
#include "bench/registry.hpp"
#include "core/splitmix.hpp"
#include "engram/units.hpp"
#include "host/census.hpp"
#include "host/placement.hpp"
#include "sys/affinity.hpp"
#include "sys/numa.hpp"
#include "tools/engram/arg_checks.hpp"

namespace engram::bench {
namespace {

struct NumaOptions {
  std::string bytes = "1GiB";      // buffer per memory node (>> LLC)
  int64_t gather_rows = 1 << 22;   // rows per gather repetition (all threads together)
  int64_t chase_hops = 1 << 21;    // hops per latency repetition
  int chase_chunks = 16;           // latency samples per repetition
};
NumaOptions g_opt;

struct NodeBuffer {
  int node = -1;
  std::vector<host::PlacedBacking> placed;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  bool verified = false;
  std::string census_line;
  nlohmann::json census;
};

// Runs fn(thread_index) on `n` threads pinned to `cpus`; returns the ns from the start signal to the last end.
template <typename Fn>
double run_pinned(const std::vector<int>& cpus, int n, Fn fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t)
    pool.emplace_back([&, t] {
      sys::ScopedAffinity pin(cpus);
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(t);
    });
  while (ready.load() < n) {
  }
  const double t0 = now_ns();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return now_ns() - t0;
}

volatile uint64_t g_sink;

uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

// Sattolo's algorithm: a single cycle through every 64-B slot; slot i holds the index of the next.
void build_chase(uint8_t* data, uint64_t bytes, uint64_t seed) {
  const uint64_t n = bytes / 64;
  std::vector<uint64_t> perm(n);
  for (uint64_t i = 0; i < n; ++i) perm[i] = i;
  uint64_t s = seed;
  for (uint64_t i = n - 1; i > 0; --i) {
    const uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(s)) * i) >> 64);
    std::swap(perm[i], perm[j]);
  }
  // perm as a cycle: next(perm[k]) = perm[k+1]
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t* slot = reinterpret_cast<uint64_t*>(data + perm[k] * 64);
    *slot = perm[(k + 1) % n] * 64;
  }
}

std::vector<int> node_cpu_list(int node) {
  auto c = sys::node_cpus(node);
  if (!c.is_ok()) return {};
  auto allowed = sys::thread_affinity();
  if (!allowed.is_ok()) return *c;
  std::vector<int> out;
  for (int x : *c)
    if (std::find(allowed->begin(), allowed->end(), x) != allowed->end()) out.push_back(x);
  return out;
}

Result<NodeBuffer> place_on(int node, uint64_t bytes) {
  NodeBuffer b;
  b.node = node;
  host::BackingOptions bo;
  bo.size_bytes = bytes;
  bo.name = "engram:bench-numa";
  auto pol = host::parse_placement("bind:" + std::to_string(node));
  if (!pol.is_ok()) return pol.status();
  auto placed = host::create_placed_backings(bo, *pol);
  if (!placed.is_ok()) return placed.status().with_context("bench numa: memory on node " + std::to_string(node));
  b.placed = std::move(*placed);
  b.data = b.placed[0].backing.data();
  b.bytes = bytes;
  host::TableIdentity id;
  id.bytes = bytes;
  id.base = reinterpret_cast<uintptr_t>(b.data);
  id.backing = b.placed[0].backing.identity().to_string();
  const host::PageCensus c = host::take_census(b.data, bytes, id, host::CensusPoint::kAfterPlacement);
  b.census = c.to_json();
  b.verified = c.known && c.fraction_on(node) >= 0.99;
  b.census_line = fmt::format("memory node {}: {} requested bind:{}, census {}: {:.1f}% on node {} ({} pages sampled){}",
                              node, format_bytes(static_cast<int64_t>(bytes)), node, c.known ? "known" : "unknown",
                              100.0 * c.fraction_on(node), node, c.pages_sampled,
                              c.known ? "" : " (" + c.reason + ")");
  return b;
}

Result<Report> run_numa(Context& ctx) {
  auto bytes_r = parse_size_bytes(ctx.smoke ? "32MiB" : g_opt.bytes);
  if (!bytes_r.is_ok()) return bytes_r.status().with_context("--numa-bytes");
  const uint64_t bytes = static_cast<uint64_t>(*bytes_r) / 4096 * 4096;
  if (bytes < (1u << 20)) return Status(Code::kInvalidArgument, "--numa-bytes: expected at least 1 MiB");
  const int64_t gather_rows = ctx.smoke ? (1 << 16) : g_opt.gather_rows;
  const int64_t hops = ctx.smoke ? (1 << 16) : g_opt.chase_hops;
  const int chunks = std::max(1, g_opt.chase_chunks);

  std::vector<int> cpu_nodes, mem_nodes = sys::memory_nodes();
  for (int n : sys::online_nodes())
    if (!node_cpu_list(n).empty()) cpu_nodes.push_back(n);
  if (cpu_nodes.empty()) return Status(Code::kUnsupported, "bench numa: no NUMA node with CPUs this process may use");

  Report rep;
  rep.key = "numa";
  std::vector<NodeBuffer> bufs;
  for (int m : mem_nodes) {
    auto b = place_on(m, bytes);
    if (!b.is_ok()) {
      rep.notes.push_back("memory node " + std::to_string(m) + ": " + b.status().to_string());
      NodeBuffer nb;
      nb.node = m;
      bufs.push_back(std::move(nb));
      continue;
    }
    if (ctx.verbose) std::fprintf(stderr, "  %s\n", b->census_line.c_str());
    rep.notes.push_back(b->census_line);
    // Content: the chase cycle in every 64-B slot's first word (also what the streams and gathers read).
    build_chase(b->data, bytes, ctx.seed + static_cast<uint64_t>(m));
    bufs.push_back(std::move(*b));
  }

  struct Cell3 {
    int c, m;
    std::vector<int> cpus;
    NodeBuffer* buf;
  };
  std::vector<Cell3> cells;
  for (int c : cpu_nodes)
    for (auto& b : bufs) cells.push_back({c, b.node, node_cpu_list(c), &b});

  const int max_threads = ctx.threads > 0 ? ctx.threads : 1 << 20;
  const int warm = std::max(ctx.warmup, 1);
  auto threads_of = [max_threads](const Cell3& cl) {
    return std::max(1, std::min<int>(static_cast<int>(cl.cpus.size()), max_threads));
  };
  std::vector<std::vector<double>> lat_chunks(cells.size());
  std::vector<Variant> seq1, seqall, lat, gat;
  for (auto& cl : cells) {
    const std::string name = fmt::format("cpu{}-mem{}", cl.c, cl.m);
    const int nall = threads_of(cl);
    auto usable = [&cl] { return cl.buf->data != nullptr && cl.buf->verified; };
    auto seq = [&cl, usable](int n) {
      return [&cl, usable, n](int) -> Result<Sample> {
        if (!usable()) return Sample{};
        const uint64_t words = cl.buf->bytes / 8;
        const auto* p = reinterpret_cast<const uint64_t*>(cl.buf->data);
        std::vector<uint64_t> part(static_cast<size_t>(n));
        Sample s;
        s.ns = run_pinned(cl.cpus, n, [&](int t) {
          const uint64_t lo = words * static_cast<uint64_t>(t) / static_cast<uint64_t>(n);
          const uint64_t hi = words * static_cast<uint64_t>(t + 1) / static_cast<uint64_t>(n);
          part[static_cast<size_t>(t)] = sum_words(p + lo, hi - lo);
        });
        for (auto x : part) g_sink = g_sink + x;
        return s;
      };
    };
    seq1.push_back({name, seq(1)});
    seqall.push_back({name, seq(std::max(1, nall))});
    const size_t ci = lat.size();
    lat.push_back({name, [&cl, usable, hops, chunks, &lat_chunks, ci, warm](int rep_i) -> Result<Sample> {
                     // One repetition = `chunks` chunk means, each one latency sample (kept in lat_chunks).
                     if (!usable()) return Sample{};
                     Sample s;
                     std::vector<double> per;
                     run_pinned(cl.cpus, 1, [&](int) {
                       uint64_t off = 0;
                       const uint8_t* base = cl.buf->data;
                       const int64_t per_chunk = std::max<int64_t>(1, hops / chunks);
                       for (int k = 0; k < chunks; ++k) {
                         const double t0 = now_ns();
                         for (int64_t h = 0; h < per_chunk; ++h) off = *reinterpret_cast<const uint64_t*>(base + off);
                         per.push_back((now_ns() - t0) / static_cast<double>(per_chunk));
                       }
                       g_sink = g_sink + off;
                     });
                     if (rep_i >= warm) lat_chunks[ci].insert(lat_chunks[ci].end(), per.begin(), per.end());
                     s.ns = stats::median(per);
                     s.tiles = static_cast<int64_t>(per.size());
                     return s;
                   }});
    gat.push_back({name, [&cl, usable, nall, gather_rows, &ctx](int rep_i) -> Result<Sample> {
                     if (!usable()) return Sample{};
                     const int n = std::max(1, nall);
                     const uint64_t slots = cl.buf->bytes / 256;
                     Sample s;
                     s.ns = run_pinned(cl.cpus, n, [&](int t) {
                       alignas(64) uint8_t local[256 * 16];
                       uint64_t st = mix_seed(ctx.seed, static_cast<uint64_t>(rep_i), static_cast<uint64_t>(t));
                       const int64_t mine = gather_rows / n;
                       uint64_t acc = 0;
                       for (int64_t r = 0; r < mine; ++r) {
                         const uint64_t slot = static_cast<uint64_t>(
                             (static_cast<unsigned __int128>(splitmix64(st)) * slots) >> 64);
                         std::memcpy(local + (r & 15) * 256, cl.buf->data + slot * 256, 256);
                         acc += local[(r & 15) * 256];
                       }
                       g_sink = g_sink + acc;
                     });
                     return s;
                   }});
  }

  ENGRAM_ASSIGN_OR_RETURN(auto t_seq1, time_variants(seq1, warm, ctx.reps, ctx.rng));
  ENGRAM_ASSIGN_OR_RETURN(auto t_seqall, time_variants(seqall, warm, ctx.reps, ctx.rng));
  ENGRAM_ASSIGN_OR_RETURN(auto t_lat, time_variants(lat, warm, ctx.reps, ctx.rng));
  ENGRAM_ASSIGN_OR_RETURN(auto t_gat, time_variants(gat, warm, ctx.reps, ctx.rng));
  for (size_t i = 0; i < t_lat.size(); ++i) t_lat[i].ns = lat_chunks[i];  // latency samples: chunk means

  // Matrices: rows = CPU node, columns = memory node.
  auto matrix = [&](const std::string& key, const std::string& title, const std::vector<VariantTimes>& t,
                    auto value_of, int precision) {
    Table tb;
    tb.key = key;
    tb.title = title;
    tb.columns.push_back({"CPU node", 0});
    for (auto& b : bufs) tb.columns.push_back({"mem N" + std::to_string(b.node), precision});
    size_t i = 0;
    for (int c : cpu_nodes) {
      std::vector<Cell> row{Cell("N" + std::to_string(c))};
      for (size_t k = 0; k < bufs.size(); ++k, ++i) row.push_back(value_of(t[i], cells[i]));
      tb.rows.push_back(std::move(row));
    }
    return tb;
  };
  auto gbps = [bytes](const VariantTimes& t, const Cell3&) {
    return Cell(static_cast<double>(bytes) / t.summary().median);
  };
  auto gbps_p5 = [bytes](const VariantTimes& t, const Cell3&) {
    return Cell(static_cast<double>(bytes) / t.summary().p95);  // slowest 5% of times = p5 of bandwidth
  };
  rep.tables.push_back(matrix("seq_read_1t_gbps", "Sequential read, 1 thread: CPU node (row) -> memory node (column), median GB/s",
                              t_seq1, gbps, 2));
  rep.tables.push_back(matrix("seq_read_all_gbps",
                              "Sequential read, all threads of the CPU node: CPU node (row) -> memory node (column), median GB/s",
                              t_seqall, gbps, 2));
  rep.tables.push_back(matrix("seq_read_all_p5_gbps", "Same, p5 (slowest repetitions), GB/s", t_seqall, gbps_p5, 2));
  rep.tables.push_back(matrix("latency_ns", "Dependent-load latency (pointer chase, 64-B stride): median ns per load",
                              t_lat, [](const VariantTimes& t, const Cell3&) { return Cell(t.summary().median); }, 1));
  rep.tables.push_back(matrix("latency_p99_ns", "Same, p99 over chunks of hops, ns",
                              t_lat, [](const VariantTimes& t, const Cell3&) { return Cell(t.summary().p99); }, 1));
  rep.tables.push_back(matrix(
      "gather_256b_mrows", "Random 256-B gather, all threads of the CPU node: median M rows/s (GB/s = M rows/s x 0.256)",
      t_gat, [gather_rows, threads_of](const VariantTimes& t, const Cell3& cl) {
        const int n = threads_of(cl);
        const double rows = static_cast<double>(gather_rows / n * n);
        return Cell(rows / t.summary().median * 1e3);
      },
      2));

  // Figures: bars per CPU node, one bar per memory node.
  auto fig = [&](const std::string& title, const std::string& ylab, const std::vector<VariantTimes>& t, auto f) {
    plot::Figure g;
    g.style = plot::Style::kBars;
    g.title = title;
    g.x_label = "CPU node";
    g.y_label = ylab;
    for (int c : cpu_nodes) g.categories.push_back("cpu N" + std::to_string(c));
    for (size_t k = 0; k < bufs.size(); ++k) {
      plot::Series s;
      s.name = "mem N" + std::to_string(bufs[k].node);
      for (size_t ci = 0; ci < cpu_nodes.size(); ++ci) s.y.push_back(f(t[ci * bufs.size() + k]));
      g.series.push_back(s);
    }
    return g;
  };
  rep.figures.push_back(fig("NUMA sequential read, all threads of the node", "read BW [GB/s]", t_seqall,
                            [bytes](const VariantTimes& t) { return static_cast<double>(bytes) / t.summary().median; }));
  rep.figures.push_back(fig("NUMA dependent-load latency (64-B pointer chase)", "latency [ns]", t_lat,
                            [](const VariantTimes& t) { return t.summary().median; }));

  rep.method = {{"warmup", warm},
                {"reps", ctx.reps},
                {"order", "every (CPU node, memory node) pair once per repetition, shuffled"},
                {"timer", "steady_clock, start signal to last thread's end"},
                {"seq_read", "8-B loads summed, bytes counted = buffer bytes"},
                {"latency", "pointer chase, random cyclic permutation of 64-B slots, one thread; sample = mean of a chunk"},
                {"gather", "memcpy of 256-B rows at uniform random 256-B-aligned offsets; rows counted"}};
  rep.setup = {{"bytes_per_node", bytes},
               {"cpu_nodes", cpu_nodes},
               {"memory_nodes", mem_nodes},
               {"backing", "memfd"},
               {"placement", "bind:<memory node>, prefaulted"},
               {"gather_rows_per_rep", gather_rows},
               {"chase_hops_per_rep", hops},
               {"chase_chunks", chunks}};
  nlohmann::json census = nlohmann::json::array();
  for (auto& b : bufs) census.push_back({{"node", b.node}, {"verified", b.verified}, {"census", b.census}});
  rep.data["census"] = census;
  nlohmann::json raw = nlohmann::json::array();
  for (size_t i = 0; i < cells.size(); ++i)
    raw.push_back({{"cpu_node", cells[i].c},
                   {"mem_node", cells[i].m},
                   {"threads_all", threads_of(cells[i])},
                   {"seq_1t_ns", summary_json(t_seq1[i].summary())},
                   {"seq_all_ns", summary_json(t_seqall[i].summary())},
                   {"latency_ns", summary_json(t_lat[i].summary())},
                   {"gather_ns", summary_json(t_gat[i].summary())}});
  rep.data["cells"] = raw;
  if (cpu_nodes.size() == 1 && mem_nodes.size() == 1)
    rep.notes.push_back("one NUMA node: the matrix is 1x1 (scripts/numa-guest gives a 2-node matrix)");
  return rep;
}

}  // namespace

ENGRAM_BENCH(numa, {.key = "numa",
                    .description = "CPU node x memory node matrices: sequential read (1 / all threads), pointer-chase "
                                   "latency, random 256-B gather; memory placed with bind:N and censused",
                    .add_options =
                        [](CLI::App& s) {
                          s.add_option("--numa-bytes", g_opt.bytes, "Buffer per memory node (>> LLC; default 1GiB)")
                              ->check(cli::size_in(int64_t{1} << 20, int64_t{1} << 40));
                          s.add_option("--gather-rows", g_opt.gather_rows, "256-B rows per gather repetition")
                              ->check(cli::range(int64_t{1}, int64_t{1} << 32));
                          s.add_option("--chase-hops", g_opt.chase_hops, "Pointer-chase hops per repetition")
                              ->check(cli::range(int64_t{1}, int64_t{1} << 32));
                          s.add_option("--chase-chunks", g_opt.chase_chunks, "Latency samples per repetition")
                              ->check(cli::range(1, 1 << 20));
                        },
                    .filter = nullptr,
                    .run = run_numa,
                    .order = 10});

}  // namespace engram::bench
