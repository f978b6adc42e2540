// Reusable parts of `engram bench lookup` (bench/lookup.cpp), also used by its technique sections
// (bench/lookup_fast.cu) and `engram profile --layout bench`: the V4.1-Flash-shaped bench table, its random content,
// id sets from the project's id sources, and sweep_case(), which times a set of lookup variants over the id sets of one case (interleaved, shuffled) and
// returns each variant's figures with % of the link and of the plain-gather ceiling measured in the same loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/measure.hpp"
#include "core/splitmix.hpp"
#include "engram/layout.hpp"
#include "engram/table.hpp"
#include "replay/id_source.hpp"

namespace engram::bench {

// One Engram layer of V4.1-Flash rows (orders 2..4 x 8 heads = 24 heads, d) of at least `bytes`.
EngramLayout bench_layout(int64_t bytes, RowFormat fmt, int d = 256);
// Random payload (splitmix64) and realistic ue8m0 scales (codes 119..135), zero fused padding; `threads`
// threads (0 = all) write it (and so first-touch pages not yet allocated).
void fill_table(const TableView& view, uint64_t seed, int threads);
// "uniform", "zipf" (alpha) or "text" (token file `tokens_path`, else data_dir/common-licenses.tokens, else
// default_token_file_path(); kNotFound says to run scripts/tokenize-setup) over `span_layout`'s rows; text ids are
// hashed with hash seed `seed`.
Result<std::unique_ptr<IdSource>> make_ids(const std::string& dist, const EngramLayout& span_layout, double alpha,
                                           uint64_t seed, const std::string& data_dir, const std::string& tokens_path = "");
// `sets` id sets of tokens x heads ids (steps 0..sets-1 of `src`), each sorted ascending when asked.
Result<std::vector<std::vector<int64_t>>> make_id_sets(IdSource& src, int64_t tokens, int sets, bool sorted);

struct CaseResult {
  Ceilings ceilings;                   // with gather_rows_per_s from `gather_variant` of this case
  std::vector<LookupFigures> figures;  // one per variant, in the order given
};
// Times `variants` (rep k = id set k) and computes their figures; the variant named `gather_variant` (if any)
// is the plain-gather ceiling of the others.
Result<CaseResult> sweep_case(const std::vector<Variant>& variants, const LookupShape& shape, const Ceilings& ceilings,
                              const std::string& gather_variant, int warmup, int reps, std::mt19937_64& rng);

}  // namespace engram::bench
