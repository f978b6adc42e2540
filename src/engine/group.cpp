// Engine in a shared group (see engram/engine.hpp and host/group.hpp). The protocol's hooks are the engine's own
// steps: "register" is the backend's registration of this rank's view of the table (so the census "after
// registration" follows it on every rank), the census steps take this rank's census (kept in censuses() and sent
// to every rank as JSON), and "load" writes the leader's content into the placed pages.
#include "engram/engine.hpp"

#include <chrono>

#include "engine/backend.hpp"
#include "engine/engine_impl.hpp"
#include "engine/guardian.hpp"
#include "engine/harness.hpp"
#include "host/census.hpp"
#include "host/group.hpp"
#include "sys/process.hpp"

namespace engram {
namespace {

host::ProtocolTimeouts timeouts_of(const EngineOptions& o) {
  return {host::Millis(o.step_timeout_ms), host::Millis(o.load_timeout_ms)};
}

// The census hook: this rank's census at `point`, kept by the engine and sent to every rank as JSON
// {"backend", "registration" (what this rank had registered when the census was taken; null: nothing), "censuses"}.
host::ProtocolHooks hooks_for(Engine& e, Engine::Impl& im, const EngineOptions& o, bool leader) {
  host::ProtocolHooks h;
  h.on_step = engine_harness(o).on_protocol_step;
  h.register_memory = [&im, &o](const std::shared_ptr<HostTable>& t, int) -> Status {
    if (!im.entry) return Status::ok();  // a serving leader has no backend of its own
    im.table = t;
    return engine::register_table(im, o, t->read_only());
  };
  h.census = [&e, &im](host::CensusPoint p, const HostTable& t, int) -> Result<std::string> {
    auto cs = t.census(p);
    nlohmann::json a = nlohmann::json::array();
    for (const auto& c : cs) a.push_back(c.to_json());
    e.add_censuses(std::move(cs));
    return nlohmann::json{{"backend", im.entry ? nlohmann::json(im.entry->name) : nlohmann::json(nullptr)},
                          {"registration", im.registration ? im.registration->describe() : nlohmann::json(nullptr)},
                          {"censuses", a}}
        .dump();
  };
  if (leader) h.load = [&o](HostTable& t) { return engine::write_content(t, o.content); };
  return h;
}

std::string default_group_name(const EngineOptions& o) {
  return o.table.group.empty() ? "engram-" + std::to_string(sys::process_id()) : o.table.group;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::lead_group(const EngramLayout& layout, const EngineOptions& o,
                                                   host::GroupChannel& channel, const std::string& job) {
  if (channel.rank() != 0) return Status(Code::kInvalidArgument, "Engine::lead_group: the channel's rank is not 0");
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = o;
  e->options_.table.group = default_group_name(o);
  Impl& im = *e->impl_;
  // Until admit() runs, the peers wait for the description: a failure here is sent to them in its place, so each
  // peer's join returns it at once instead of waiting out its step timeout.
  const std::string& group = e->options_.table.group;
  auto tell_peers = [&](const Status& s) {
    return host::SharedTableGroup::fail_peers(channel, group, s, host::Millis(o.step_timeout_ms));
  };
  if (Status s = engine::load_cache_profile(e->options_, layout); !s.is_ok()) return tell_peers(s);
  auto entry = engine::choose_backend(o, &e->backend_note_);
  if (!entry.is_ok()) return tell_peers(entry.status());
  im.entry = *entry;
  auto guardian = engine::guard_named_backings(e->options_.table);
  if (!guardian.is_ok()) return tell_peers(guardian.status());
  auto t = HostTable::create(layout, e->options_.table);
  if (!t.is_ok()) return tell_peers(t.status());
  im.table = std::shared_ptr<HostTable>(std::move(*t));
  e->add_censuses(im.table->census(host::CensusPoint::kAfterPlacement));
  auto g = host::SharedTableGroup::lead(im.table, group, job, *guardian);
  if (!g.is_ok()) return tell_peers(g.status());
  im.group = std::move(*g);
  im.group_rank = 0;
  im.group_world = channel.world_size();
  im.group_name = e->options_.table.group;
  im.group_job = job;
  const host::ProtocolHooks hooks = hooks_for(*e, im, e->options_, /*leader=*/true);
  ENGRAM_RETURN_IF_ERROR(im.group->admit(channel, hooks, timeouts_of(o)));
  ENGRAM_RETURN_IF_ERROR(engine::build_stack(im, e->options_));
  return e;
}

Result<std::unique_ptr<Engine>> Engine::serve_group(const EngramLayout& layout, const EngineOptions& o,
                                                    const std::string& group, const std::string& job) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = o;
  e->options_.table.group = group.empty() ? default_group_name(o) : group;
  Impl& im = *e->impl_;
  ENGRAM_ASSIGN_OR_RETURN(std::shared_ptr<sys::FileGuardian> guardian, engine::guard_named_backings(e->options_.table));
  ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<HostTable> t, HostTable::create(layout, e->options_.table));
  im.table = std::shared_ptr<HostTable>(std::move(t));
  e->add_censuses(im.table->census(host::CensusPoint::kAfterPlacement));
  ENGRAM_ASSIGN_OR_RETURN(im.group, host::SharedTableGroup::lead(im.table, e->options_.table.group, job, guardian));
  im.group_rank = 0;
  im.group_world = 1;
  im.group_name = e->options_.table.group;
  im.group_job = job;
  const auto t_load = std::chrono::steady_clock::now();
  ENGRAM_RETURN_IF_ERROR(im.group->load([&](HostTable& table) { return engine::write_content(table, o.content); }));
  if (o.content.kind != TableContent::Kind::kZero) {
    im.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    e->add_censuses(im.table->census(host::CensusPoint::kAfterLoad));
  }
  im.metrics->init(*im.table, e->options_, "none", /*has_queue=*/false, /*timeline=*/false, im.load_s, im.group_world);
  im.metrics->set_censuses(im.censuses);
  return e;
}

Status Engine::admit(host::GroupChannel& channel) {
  Impl& im = *impl_;
  if (!im.group || !im.group->is_leader())
    return Status(Code::kInvalidArgument, "Engine::admit: only the leader of a shared group admits peers");
  const host::ProtocolHooks hooks = hooks_for(*this, im, options_, /*leader=*/true);
  ENGRAM_RETURN_IF_ERROR(im.counted(im.group->admit(channel, hooks, timeouts_of(options_))));
  im.group_world = channel.world_size();
  im.metrics->set_group_ranks(im.group_world);
  im.metrics->add_peers_attached(im.group_world - 1);
  return Status::ok();
}

Result<std::unique_ptr<Engine>> Engine::join_group(const EngineOptions& o, host::GroupChannel& channel,
                                                   const Configure& configure) {
  if (channel.rank() == 0) return Status(Code::kInvalidArgument, "Engine::join_group: rank 0 is the leader");
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = o;
  e->options_.rank = o.rank > 0 ? o.rank : channel.rank();
  Impl& im = *e->impl_;
  host::ProtocolHooks hooks = hooks_for(*e, im, e->options_, /*leader=*/false);
  // The backend is chosen once this rank's options are final: after the leader's job arrived, before it attaches.
  hooks.on_described = [&](const std::string& job, const EngramLayout& layout) -> Status {
    if (configure) ENGRAM_RETURN_IF_ERROR(configure(job, layout, e->options_));
    e->options_.rank = e->options_.rank > 0 ? e->options_.rank : channel.rank();
    ENGRAM_RETURN_IF_ERROR(engine::load_cache_profile(e->options_, layout));
    ENGRAM_ASSIGN_OR_RETURN(im.entry, engine::choose_backend(e->options_, &e->backend_note_));
    return Status::ok();
  };
  host::PeerOptions po;
  po.read_only = o.read_only;
  ENGRAM_ASSIGN_OR_RETURN(im.group, host::SharedTableGroup::join(channel, po, hooks, timeouts_of(o)));
  im.table = im.group->table();
  im.group_rank = channel.rank();
  im.group_world = channel.world_size();
  im.group_name = im.group->group();
  im.group_job = im.group->job();
  e->options_.table.group = im.group_name;
  ENGRAM_RETURN_IF_ERROR(engine::build_stack(im, e->options_));
  return e;
}

const std::vector<host::StepRecord>& Engine::group_steps() const {
  static const std::vector<host::StepRecord> none;
  return impl_->group ? impl_->group->steps() : none;
}

}  // namespace engram
