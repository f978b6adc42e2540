// Shared-table protocol (see group_protocol.hpp): the leader's admit() and a peer's join() run the same
// steps in lock step; each step is one hook, this rank's local work and an all-gather, so that the
// first failing rank's message reaches every rank.
#include "host/group_protocol.hpp"

#include <chrono>
#include <utility>

#include "host/group_wire.hpp"
#include "sys/memfd.hpp"
#include "sys/unix_socket.hpp"

namespace engram::host {

using nlohmann::json;
using wire::kProtocolVersion;
using Clock = std::chrono::steady_clock;

const std::vector<std::string>& protocol_steps() {
  static const std::vector<std::string> steps{kStepDescribe,         kStepAttach, kStepRegister, kStepCensusRegistered,
                                              kStepLoad,             kStepReady,  kStepCensusLoaded};
  return steps;
}

SharedTableGroup::~SharedTableGroup() = default;

Result<std::unique_ptr<SharedTableGroup>> SharedTableGroup::lead(std::shared_ptr<HostTable> table,
                                                                 const std::string& group, const std::string& job,
                                                                 std::shared_ptr<sys::FileGuardian> guardian) {
  if (!table) return Status(Code::kInvalidArgument, "shared group '" + group + "': no table");
  const auto parts = table->parts();
  if (parts.empty())
    return Status(Code::kInvalidArgument, "shared group '" + group + "': the table has no shareable backing "
                                                                      "(private memory from allocate())");
  bool named = false;
  for (const auto& p : parts) {
    const Backing& b = p.backing->backing;
    if (b.kind() == BackingKind::kAnonThp)
      return Status(Code::kInvalidArgument, "shared group '" + group +
                                                "': an anon-thp backing is private to one process and cannot be "
                                                "shared (use memfd, shm or hugetlb)");
    if (!b.owner())
      return Status(Code::kInvalidArgument, "shared group '" + group + "': the table is attached, not created here");
    named = named || (b.kind() == BackingKind::kShmFile && !b.unlinked());
  }
  std::unique_ptr<SharedTableGroup> g(new SharedTableGroup());
  g->leader_ = true;
  g->group_ = group;
  g->job_ = job;
  g->table_ = std::move(table);
  g->guardian_ = std::move(guardian);
  if (named && !g->guardian_) {
    auto guard = sys::FileGuardian::start();
    if (!guard.is_ok()) return guard.status().with_context("shared group '" + group + "': file guardian");
    g->guardian_ = std::make_shared<sys::FileGuardian>(std::move(*guard));
  }
  // Arming is idempotent: a file already armed by the creator's TableOptions::on_named_created keeps one entry.
  if (g->guardian_)
    for (const auto& p : parts) {
      const Backing& b = p.backing->backing;
      if (b.kind() == BackingKind::kShmFile && !b.unlinked()) ENGRAM_RETURN_IF_ERROR(g->guardian_->arm(b.identity().path));
    }
  return g;
}

nlohmann::json SharedTableGroup::description() const {
  json segs = json::array();
  int fd_index = 0;
  const HostTable& t = *table_;
  for (const auto& p : t.parts()) {
    const Backing& b = p.backing->backing;
    const auto& id = b.identity();
    const PlacementReport& r = p.backing->report;
    const bool by_fd = id.kind == BackingKind::kMemfd || id.kind == BackingKind::kHugetlb;
    const HeadRange h = t.n_shards() > 1 || !t.tp().whole() ? t.shard_heads(p.shard) : HeadRange{0, t.layout().heads()};
    const uint64_t offset = static_cast<uint64_t>(b.data() - t.view(p.layer_index, p.replica).data);
    segs.push_back({{"kind", backing_kind_name(id.kind)},
                    {"name", id.name},
                    {"path", id.path},
                    {"size_bytes", b.size_bytes()},
                    {"inode", id.inode},
                    {"device", id.device},
                    {"layer_index", p.layer_index},
                    {"replica_node", r.replica_node},
                    {"head_begin", h.begin},
                    {"head_end", h.end},
                    {"offset_bytes", offset},
                    {"fd_index", by_fd ? fd_index++ : -1},
                    {"placement_requested", r.requested},
                    {"placement_resolved", r.resolved},
                    {"placement_obtained", r.obtained},
                    {"prefault", r.prefault}});
  }
  json out = {{"protocol", kProtocolVersion}, {"group", group_}, {"job", job_}, {"layout", layout_to_json(t.layout())},
              {"segments", segs}};
  if (!t.tp().whole()) {
    out["tp_size"] = t.tp().size;
    out["tp_rank"] = t.tp().rank;
  }
  return out;
}

Status SharedTableGroup::unlink_named() {
  if (!leader_ || !table_) return Status::ok();
  return table_->unlink_named_files([this](const std::string& path) {
    if (guardian_) (void)guardian_->disarm(path);
  });
}

Status SharedTableGroup::fail_peers(GroupChannel& channel, const std::string& group, const Status& failure,
                                    Millis timeout) {
  const Status why = failure.is_ok() ? Status(Code::kInternal, "fail_peers called without a failure") : failure;
  std::string bytes = wire::encode_leader_failure(group, why);
  std::vector<int> none;
  (void)channel.broadcast(kStepDescribe, &bytes, &none, timeout);
  return why.with_context("shared group '" + group + "', step 'describe'");
}

Status SharedTableGroup::load(const std::function<Status(HostTable&)>& loader) {
  if (!leader_) return Status(Code::kInvalidArgument, "shared group '" + group_ + "': only the leader loads weights");
  Status s = loader(*table_);
  if (s.is_ok()) loaded_ = true;
  return s;
}

namespace {

// Runs one step on this rank: hook, local work, all-gather, record. Returns the group's verdict.
struct StepRunner {
  GroupChannel& channel;
  const ProtocolHooks& hooks;
  std::vector<StepRecord>& record;
  std::string group;

  Status run(const std::string& step, Millis timeout, const std::function<Status(std::string* message)>& local) {
    const auto t0 = Clock::now();
    if (hooks.on_step) hooks.on_step(step, channel.rank());
    RankEntry mine;
    mine.rank = channel.rank();
    mine.pid = sys::process_id();
    mine.status = local(&mine.message);
    auto entries = channel.all_gather(step, mine, timeout);
    StepRecord rec;
    rec.step = step;
    rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!entries.is_ok()) {
      rec.entries.push_back(mine);
      record.push_back(std::move(rec));
      return entries.status().with_context("shared group '" + group + "'");
    }
    rec.entries = *entries;
    record.push_back(std::move(rec));
    Status f = first_failure(step, *entries);
    return f.is_ok() ? f : f.with_context("shared group '" + group + "'");
  }
};

Status run_census(const ProtocolHooks& hooks, CensusPoint point, const HostTable* table, int rank, std::string* msg) {
  if (!hooks.census || !table) return Status::ok();
  auto c = hooks.census(point, *table, rank);
  if (!c.is_ok()) return c.status();
  *msg = std::move(*c);
  return Status::ok();
}

}  // namespace

Status SharedTableGroup::admit(GroupChannel& channel, const ProtocolHooks& hooks, const ProtocolTimeouts& timeouts) {
  if (!leader_) return Status(Code::kInvalidArgument, "shared group '" + group_ + "': admit() is the leader's");
  if (channel.rank() != 0) return Status(Code::kInvalidArgument, "shared group '" + group_ + "': channel rank is not 0");
  steps_.clear();
  auto fail = [&](Status s) {
    if (!s.is_ok()) (void)unlink_named();  // no named file survives a failed group
    return s;
  };
  // Step "describe".
  {
    const auto t0 = Clock::now();
    if (hooks.on_step) hooks.on_step(kStepDescribe, 0);
    std::vector<int> fds;
    for (const auto& p : table_->parts()) {
      const Backing& b = p.backing->backing;
      if (b.kind() == BackingKind::kMemfd || b.kind() == BackingKind::kHugetlb) fds.push_back(b.fd());
    }
    std::string bytes = wire::dump(description());
    // An engine's channel that cannot pass descriptors still works with named files; with a memfd
    // the peers are told why in place of the description, and their join() returns it.
    if (!fds.empty() && !channel.can_pass_fds())
      return fail(fail_peers(channel, group_,
                             Status(Code::kUnsupported, "the channel (" + channel.describe() +
                                                            ") cannot pass descriptors: share a named backing (shm) "
                                                            "instead"),
                             timeouts.step));
    ENGRAM_RETURN_IF_ERROR(fail(channel.broadcast(kStepDescribe, &bytes, &fds, timeouts.step)
                                    .with_context("shared group '" + group_ + "'")));
    steps_.push_back({kStepDescribe, std::chrono::duration<double>(Clock::now() - t0).count(), {}});
  }
  StepRunner r{channel, hooks, steps_, group_};
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepAttach, timeouts.step, [](std::string*) { return Status::ok(); })));
  // Every peer holds a mapping or a descriptor now: the name has done its job.
  const Status unlinked = unlink_named();
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepRegister, timeouts.step, [&](std::string*) {
    if (!unlinked.is_ok()) return unlinked.with_context("unlink of the named table after attach");
    return hooks.register_memory ? hooks.register_memory(table_, 0) : Status::ok();
  })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepCensusRegistered, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterRegistration, table_.get(), 0, msg);
  })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepLoad, timeouts.step, [&](std::string*) {
    if (!hooks.load || loaded_) return Status::ok();
    Status s = hooks.load(*table_);
    if (s.is_ok()) loaded_ = true;
    return s.with_context("leader weight load");
  })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepReady, timeouts.step, [](std::string*) { return Status::ok(); })));
  ENGRAM_RETURN_IF_ERROR(fail(r.run(kStepCensusLoaded, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterLoad, table_.get(), 0, msg);
  })));
  return Status::ok();
}

namespace {

// The description's segments as HostTable::attach takes them; the received descriptors move into the specs
// (those not used are closed by the caller's list).
Result<std::vector<AttachSpec>> attach_specs(const std::vector<wire::SegmentInfo>& infos, std::vector<int>& fds) {
  std::vector<AttachSpec> out;
  for (size_t k = 0; k < infos.size(); ++k) {
    const auto& i = infos[k];
    const std::string what = "segment " + std::to_string(k) + " (" + i.kind + " " + (i.path.empty() ? i.name : i.path) + ")";
    auto kind = parse_backing_kind(i.kind);
    if (!kind.is_ok()) return kind.status().with_context(what);
    AttachSpec a;
    a.kind = *kind;
    a.name = i.name;
    a.path = i.path;
    a.size_bytes = i.size_bytes;
    a.inode = i.inode;
    a.device = i.device;
    a.layer_index = static_cast<int>(i.layer_index);
    a.replica_node = static_cast<int>(i.replica_node);
    a.heads = {static_cast<int>(i.head_begin), static_cast<int>(i.head_end)};
    a.offset_bytes = i.offset_bytes;
    a.placement_requested = i.requested;
    a.placement_resolved = i.resolved;
    a.placement_obtained = i.obtained;
    a.prefault = i.prefault;
    if (a.kind != BackingKind::kShmFile) {
      if (i.fd_index < 0 || static_cast<size_t>(i.fd_index) >= fds.size() || fds[static_cast<size_t>(i.fd_index)] < 0)
        return Status(Code::kInvalidArgument, what + ": descriptor " + std::to_string(i.fd_index) +
                                                  " announced but not received");
      a.fd = std::exchange(fds[static_cast<size_t>(i.fd_index)], -1);
    }
    out.push_back(std::move(a));
  }
  return out;
}

// Closes the descriptors a peer received and did not hand on.
struct FdList {
  std::vector<int> fds;
  ~FdList() {
    for (int fd : fds)
      if (fd >= 0) (void)sys::close_fd(fd);
  }
};

}  // namespace

Result<std::unique_ptr<SharedTableGroup>> SharedTableGroup::join(GroupChannel& channel, const PeerOptions& options,
                                                                 const ProtocolHooks& hooks,
                                                                 const ProtocolTimeouts& timeouts) {
  if (channel.rank() == 0) return Status(Code::kInvalidArgument, "SharedTableGroup::join: rank 0 is the leader");
  std::unique_ptr<SharedTableGroup> g(new SharedTableGroup());
  g->leader_ = false;
  const int rank = channel.rank();
  const auto t0 = Clock::now();
  if (hooks.on_step) hooks.on_step(kStepDescribe, rank);
  std::string bytes;
  FdList fds;
  ENGRAM_RETURN_IF_ERROR(channel.broadcast(kStepDescribe, &bytes, &fds.fds, timeouts.step).with_context("shared group"));
  g->steps_.push_back({kStepDescribe, std::chrono::duration<double>(Clock::now() - t0).count(), {}});
  std::vector<wire::SegmentInfo> infos;
  auto description = wire::decode_description(bytes);
  Status described = description.status();
  EngramLayout layout;
  TpSlice tp;
  if (described.is_ok()) {
    // The leader gave up before admitting us: its failure is ours, now (it waits for no answer).
    if (!description->leader_failure.is_ok())
      return description->leader_failure.with_context("shared group '" + description->group + "', step 'describe'");
    g->group_ = description->group;
    g->job_ = description->job;
    tp = description->tp;
    infos = std::move(description->segments);
    auto l = layout_from_json(description->layout);
    if (l.is_ok()) layout = *l;
    else described = l.status().with_context("the leader's table layout");
  }
  if (g->group_.empty()) g->group_ = "?";
  StepRunner r{channel, hooks, g->steps_, g->group_};
  ENGRAM_RETURN_IF_ERROR(r.run(kStepAttach, timeouts.step, [&](std::string*) {
    if (!described.is_ok()) return described;
    if (hooks.on_described) ENGRAM_RETURN_IF_ERROR(hooks.on_described(g->job_, layout));
    ENGRAM_ASSIGN_OR_RETURN(std::vector<AttachSpec> specs, attach_specs(infos, fds.fds));
    AttachOptions ao;
    ao.read_only = options.read_only;
    ao.gpu_node = options.gpu_node;
    ao.tp = tp;
    ENGRAM_ASSIGN_OR_RETURN(std::unique_ptr<HostTable> t, HostTable::attach(layout, std::move(specs), ao));
    g->table_ = std::shared_ptr<HostTable>(std::move(t));
    return Status::ok();
  }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepRegister, timeouts.step, [&](std::string*) {
    return hooks.register_memory ? hooks.register_memory(g->table_, rank) : Status::ok();
  }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepCensusRegistered, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterRegistration, g->table_.get(), rank, msg);
  }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepLoad, timeouts.load, [](std::string*) { return Status::ok(); }));
  g->loaded_ = true;
  ENGRAM_RETURN_IF_ERROR(r.run(kStepReady, timeouts.step, [](std::string*) { return Status::ok(); }));
  ENGRAM_RETURN_IF_ERROR(r.run(kStepCensusLoaded, timeouts.step, [&](std::string* msg) {
    return run_census(hooks, CensusPoint::kAfterLoad, g->table_.get(), rank, msg);
  }));
  return g;
}

}  // namespace engram::host
