// Stale-state sweep (see sweep.hpp). Order of removal: the object, then its record, so that a sweep
// interrupted between the two leaves a record without an object, which the next sweep removes.
// Records are listed first; objects without a record are looked at only for the "unowned" report.
#include "host/sweep.hpp"

#include <algorithm>
#include <set>

#include "core/units.hpp"
#include "sys/file.hpp"
#include "sys/numa_sysfs.hpp"
#include "sys/owner.hpp"
#include "sys/unix_socket.hpp"

namespace engram::host {
namespace {

// ".<name>.tmp-<16 hex digits>": the temporary sibling a writer makes (host/safetensors_write.hpp).
bool is_temp_sibling_name(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (name.empty() || name[0] != '.' || at == std::string::npos || at == 0 || name.size() != at + 5 + 16) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at + 5), name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string kind_of(const std::string& name, sys::PathKind k) {
  if (k == sys::PathKind::kSocket) return "socket";
  if (k == sys::PathKind::kDirectory && is_temp_sibling_name(name)) return "temp directory";
  if (name.find(".tmp-") != std::string::npos) return "temp file";
  if (name.rfind("engram", 0) == 0) return "table";
  return "file";
}

void sweep_dir(const std::string& dir, const SweepOptions& o, const std::string& runtime_dir, SweepReport* r) {
  auto names = sys::list_dir(dir);
  if (!names.is_ok()) {
    if (names.status().code() != Code::kNotFound) r->errors.push_back(names.status().message());
    return;
  }
  const uint32_t me = sys::effective_uid();
  std::set<std::string> recorded;
  for (const std::string& name : *names) {
    std::string object_name;
    if (!sys::parse_owner_record_name(name, &object_name)) continue;
    recorded.insert(object_name);
    const std::string record_path = dir + "/" + name;
    const std::string object_path = dir + "/" + object_name;
    SweptObject obj;
    obj.path = object_path;
    auto info = sys::lstat_path(object_path);
    const bool object_there = info.is_ok();
    obj.kind = object_there ? kind_of(object_name, info->kind) : "owner record";
    if (object_there && info->kind == sys::PathKind::kRegular) obj.bytes = info->allocated_bytes;
    if (!object_there) obj.path = record_path;
    auto rec = sys::read_owner_record(record_path);
    if (!rec.is_ok()) {
      if (rec.status().code() == Code::kNotFound) continue;  // removed meanwhile (its owner, a sweep)
      obj.reason = "unreadable owner record: " + rec.status().message();
      r->kept.push_back(obj);
      continue;
    }
    obj.owner_pid = rec->owner.pid;
    if (rec->file_uid != me || (object_there && info->uid != me)) {
      obj.reason = "belongs to uid " + std::to_string(object_there && info->uid != me ? info->uid : rec->file_uid);
      r->kept.push_back(obj);
      continue;
    }
    std::string why;
    const sys::OwnerState state = sys::owner_state(rec->owner, &why);
    obj.reason = why;
    if (state != sys::OwnerState::kDead) {
      r->kept.push_back(obj);
      continue;
    }
    // A directory is removed only when it is a writer's temporary directory (".<name>.tmp-<16 hex>", a model
    // directory of table create --format hf-model); any other is left alone.
    const bool temp_dir = object_there && info->kind == sys::PathKind::kDirectory && is_temp_sibling_name(object_name);
    if (object_there && !temp_dir && info->kind != sys::PathKind::kRegular && info->kind != sys::PathKind::kSocket) {
      obj.reason += "; but " + object_path + " is not a file or socket: left alone";
      r->kept.push_back(obj);
      continue;
    }
    if (!o.dry_run) {
      if (object_there) {
        Status u = temp_dir ? sys::remove_tree(object_path) : sys::unlink_path(object_path);
        if (!u.is_ok() && u.code() != Code::kNotFound) {
          r->errors.push_back(u.message());
          continue;
        }
      }
      Status u = sys::unlink_path(record_path);
      if (!u.is_ok() && u.code() != Code::kNotFound) r->errors.push_back(u.message());
    }
    r->removed.push_back(obj);
  }
  if (!o.report_unowned) return;
  for (const std::string& name : *names) {
    if (recorded.count(name) || sys::parse_owner_record_name(name, nullptr)) continue;
    auto info = sys::lstat_path(dir + "/" + name);
    if (!info.is_ok()) continue;
    const bool socket_here = info->kind == sys::PathKind::kSocket && dir == runtime_dir;
    const bool table_like = info->kind == sys::PathKind::kRegular && name.rfind("engram", 0) == 0;
    if (!socket_here && !table_like) continue;
    SweptObject obj;
    obj.path = dir + "/" + name;
    obj.kind = kind_of(name, info->kind);
    if (info->kind == sys::PathKind::kRegular) obj.bytes = info->allocated_bytes;
    obj.reason = info->uid == me ? "no owner record (not made by this engram, or by an older one): left alone"
                                 : "belongs to uid " + std::to_string(info->uid);
    r->kept.push_back(obj);
  }
}

nlohmann::json objects_json(const std::vector<SweptObject>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& o : v)
    a.push_back({{"path", o.path},
                 {"kind", o.kind},
                 {"bytes", o.bytes >= 0 ? nlohmann::json(o.bytes) : nlohmann::json(nullptr)},
                 {"owner_pid", o.owner_pid > 0 ? nlohmann::json(o.owner_pid) : nlohmann::json(nullptr)},
                 {"reason", o.reason}});
  return a;
}

std::string object_line(const char* verb, const SweptObject& o) {
  std::string s = std::string(verb) + " " + o.path + " (" + o.kind;
  if (o.bytes >= 0) s += ", " + format_bytes(o.bytes);
  return s + "): " + o.reason;
}

}  // namespace

int64_t SweepReport::removed_bytes() const {
  int64_t n = 0;
  for (const auto& o : removed) n += std::max<int64_t>(0, o.bytes);
  return n;
}

nlohmann::json SweepReport::to_json() const {
  return {{"dry_run", dry_run},      {"dirs", dirs},         {"removed", objects_json(removed)},
          {"removed_bytes", removed_bytes()}, {"kept", objects_json(kept)}, {"errors", errors}};
}

std::vector<std::string> SweepReport::lines(bool include_kept) const {
  std::vector<std::string> out;
  for (const auto& o : removed) out.push_back(object_line(dry_run ? "would remove" : "removed", o));
  if (include_kept)
    for (const auto& o : kept) out.push_back(object_line("kept", o));
  for (const auto& e : errors) out.push_back("error: " + e);
  return out;
}

SweepReport sweep_stale(const SweepOptions& o) {
  SweepReport r;
  r.dry_run = o.dry_run;
  auto runtime = sys::private_runtime_dir();
  const std::string runtime_dir = runtime.is_ok() ? *runtime : "";
  for (const std::string& d : o.dirs) {
    std::string dir = d;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (std::find(r.dirs.begin(), r.dirs.end(), dir) != r.dirs.end()) continue;
    r.dirs.push_back(dir);
    sweep_dir(dir, o, runtime_dir, &r);
  }
  return r;
}

std::vector<std::string> default_sweep_dirs(const std::string& shm_dir) {
  std::vector<std::string> dirs{shm_dir.empty() ? std::string("/dev/shm") : shm_dir};
  auto runtime = sys::private_runtime_dir();
  if (runtime.is_ok() && *runtime != dirs.front()) dirs.push_back(*runtime);
  return dirs;
}

}  // namespace engram::host
