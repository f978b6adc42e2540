// PyCallbackChannel: a GroupChannel whose operations are Python methods (engram_offload.GroupChannel subclasses
// such as TorchGroupChannel), so that an engine's own process group runs the shared-table protocol.
#pragma once

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "engram/group_channel.hpp"

namespace engram::py_bind {

inline Code code_from_name(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c)
    if (name == code_name(static_cast<Code>(c))) return static_cast<Code>(c);
  return Code::kInternal;
}

// The protocol runs with the GIL released; each call takes it back. A Python
// exception becomes kIo on this rank naming the step (the protocol then fails with that step and rank).
//   impl.broadcast(step, data: bytes | None, fds: list[int], timeout_s) -> (bytes, list[int])
//   impl.all_gather(step, entry: dict, timeout_s) -> list[dict]   (dict: rank, pid, code, sys_error,
//                                                                  status_message, message)
class PyCallbackChannel final : public host::GroupChannel {
 public:
  explicit PyCallbackChannel(py::object impl) : impl_(std::move(impl)) {
    rank_ = impl_.attr("rank").cast<int>();
    world_ = impl_.attr("world_size").cast<int>();
    fds_ = impl_.attr("can_pass_fds").cast<bool>();
    desc_ = py::str(impl_.attr("describe")()).cast<std::string>();
  }
  ~PyCallbackChannel() override {
    py::gil_scoped_acquire acquire;
    impl_ = py::object();
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  bool can_pass_fds() const override { return fds_; }
  std::string describe() const override { return desc_; }

  Status broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, host::Millis timeout) override {
    if (fds && !fds->empty() && !fds_)
      return Status(Code::kUnsupported, "channel " + desc_ + " cannot pass descriptors");
    py::gil_scoped_acquire acquire;
    try {
      py::object data = rank_ == 0 ? py::object(py::bytes(*bytes)) : py::object(py::none());
      py::list fd_list;
      if (rank_ == 0 && fds)
        for (int fd : *fds) fd_list.append(fd);
      py::object r = impl_.attr("broadcast")(step, data, fd_list, timeout.count() / 1e3);
      if (rank_ != 0) {
        auto t = r.cast<py::tuple>();
        *bytes = t[0].cast<std::string>();
        if (fds) {
          fds->clear();
          for (auto h : t[1].cast<py::list>()) fds->push_back(h.cast<int>());
        }
      }
      return Status::ok();
    } catch (py::error_already_set& e) {
      return Status(Code::kIo, "channel " + desc_ + ", broadcast '" + step + "': " + e.what());
    } catch (const py::cast_error& e) {
      return Status(Code::kInvalidArgument, "channel " + desc_ + ", broadcast '" + step + "' returned " + e.what());
    }
  }

  Result<std::vector<host::RankEntry>> all_gather(const std::string& step, const host::RankEntry& mine,
                                                  host::Millis timeout) override {
    py::gil_scoped_acquire acquire;
    try {
      py::dict d;
      d["rank"] = mine.rank;
      d["pid"] = mine.pid;
      d["code"] = code_name(mine.status.code());
      d["sys_error"] = mine.status.sys_error();
      d["status_message"] = mine.status.message();
      d["message"] = py::bytes(mine.message);
      py::object r = impl_.attr("all_gather")(step, d, timeout.count() / 1e3);
      std::vector<host::RankEntry> out;
      for (auto h : r.cast<py::list>()) {
        auto e = h.cast<py::dict>();
        host::RankEntry x;
        x.rank = e["rank"].cast<int>();
        x.pid = e["pid"].cast<int>();
        const Code c = code_from_name(e["code"].cast<std::string>());
        if (c != Code::kOk) x.status = Status(c, e["status_message"].cast<std::string>(), e["sys_error"].cast<int>());
        x.message = e["message"].cast<std::string>();
        out.push_back(std::move(x));
      }
      if (static_cast<int>(out.size()) != world_)
        return Status(Code::kInvalidArgument, "channel " + desc_ + ", all_gather '" + step + "': " +
                                                  std::to_string(out.size()) + " entries for " +
                                                  std::to_string(world_) + " ranks");
      return out;
    } catch (py::error_already_set& e) {
      return Status(Code::kIo, "channel " + desc_ + ", all_gather '" + step + "': " + e.what());
    } catch (const py::cast_error& e) {
      return Status(Code::kInvalidArgument, "channel " + desc_ + ", all_gather '" + step + "' returned " + e.what());
    }
  }

 private:
  py::object impl_;
  int rank_ = 0, world_ = 1;
  bool fds_ = false;
  std::string desc_;
};

}  // namespace engram::py_bind
