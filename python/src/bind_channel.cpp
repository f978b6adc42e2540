// Group channels from Python: the library's Unix socket channel and listener (listen_unix_group /
// connect_unix_group), and PyCallbackChannel, a GroupChannel whose operations are Python methods
// (engram_offload.GroupChannel subclasses such as TorchGroupChannel), so that an engine's own process group runs the
// shared-table protocol.
#include <pybind11/stl.h>

#include "common.hpp"
#include "engram/group_channel.hpp"
#include "py_channel.hpp"

namespace engram::py_bind {
namespace {

// Python's UnixGroupChannel: the library's channel (whose concrete type is internal) behind a type of its own, so
// that Python tells it apart from the other GroupChannels.
class UnixChannel final : public host::GroupChannel {
 public:
  explicit UnixChannel(std::unique_ptr<host::GroupChannel> c) : c_(std::move(c)) {}
  int rank() const override { return c_->rank(); }
  int world_size() const override { return c_->world_size(); }
  bool can_pass_fds() const override { return c_->can_pass_fds(); }
  std::string describe() const override { return c_->describe(); }
  Status broadcast(const std::string& step, std::string* bytes, std::vector<int>* fds, host::Millis timeout) override {
    return c_->broadcast(step, bytes, fds, timeout);
  }
  Result<std::vector<host::RankEntry>> all_gather(const std::string& step, const host::RankEntry& mine,
                                                  host::Millis timeout) override {
    return c_->all_gather(step, mine, timeout);
  }

 private:
  std::unique_ptr<host::GroupChannel> c_;
};

std::unique_ptr<UnixChannel> unix_channel(Result<std::unique_ptr<host::GroupChannel>> r) {
  return std::make_unique<UnixChannel>(take(std::move(r)));
}

}  // namespace

host::GroupChannel& channel_of(const py::object& obj, std::unique_ptr<PyCallbackChannel>& holder) {
  try {
    return obj.cast<host::GroupChannel&>();
  } catch (const py::cast_error&) {
  }
  if (!py::hasattr(obj, "broadcast") || !py::hasattr(obj, "all_gather"))
    invalid("group: expected a GroupChannel (UnixGroupChannel, TorchGroupChannel or a GroupChannel subclass)");
  holder = std::make_unique<PyCallbackChannel>(obj);
  return *holder;
}

void bind_channel(py::module_& m) {
  py::class_<host::GroupChannel>(m, "_Channel")
      .def_property_readonly("rank", &host::GroupChannel::rank)
      .def_property_readonly("world_size", &host::GroupChannel::world_size)
      .def_property_readonly("can_pass_fds", &host::GroupChannel::can_pass_fds)
      .def("describe", &host::GroupChannel::describe)
      .def(
          "barrier",
          [](host::GroupChannel& c, const std::string& step, double timeout_s) {
            Status s;
            {
              py::gil_scoped_release release;
              s = c.barrier(step, host::Millis(static_cast<int64_t>(timeout_s * 1e3)));
            }
            check(s);
          },
          py::arg("step") = "barrier", py::arg("timeout_s") = 30.0);

  py::class_<UnixChannel, host::GroupChannel>(
      m, "UnixGroupChannel",
      "The library's own group channel: AF_UNIX SOCK_SEQPACKET star around the leader, peers checked with\n"
      "SO_PEERCRED, memfds passed with SCM_RIGHTS, every wait bounded. Peers connect(); the leader gets its\n"
      "channel from UnixGroupListener.accept().")
      .def_static(
          "connect",
          [](const std::string& socket_path, const std::string& group, double timeout_s) {
            host::UnixGroupOptions o;
            o.group = group;
            Result<std::unique_ptr<host::GroupChannel>> r = Status(Code::kInternal, "connect did not run");
            {
              py::gil_scoped_release release;
              r = host::connect_unix_group(socket_path, o, host::Millis(static_cast<int64_t>(timeout_s * 1e3)));
            }
            return unix_channel(std::move(r));
          },
          py::arg("socket_path"), py::arg("group") = "engram", py::arg("timeout_s") = 30.0,
          "Peer: connects to the leader's socket (retrying until it exists), waits for its rank. Raises EngramError:\n"
          "permission / invalid_argument (refused, with the leader's reason), timeout.")
      .def("__repr__", &UnixChannel::describe);

  py::class_<host::GroupListener>(m, "UnixGroupListener",
                                      "The leader's listening endpoint of a UnixGroupChannel.")
      .def_static(
          "listen",
          [](const std::string& group, const std::string& socket_path) {
            host::UnixGroupOptions o;
            o.group = group;
            o.socket_path = socket_path;
            return take(host::listen_unix_group(o));
          },
          py::arg("group") = "engram", py::arg("socket_path") = "",
          "Listens in a private directory (socket_path '' = <runtime dir>/<group>.<random>.sock).")
      .def_property_readonly("socket_path", &host::GroupListener::socket_path)
      .def(
          "accept",
          [](host::GroupListener& l, int n_peers, double timeout_s) {
            Result<std::unique_ptr<host::GroupChannel>> r = Status(Code::kInternal, "accept did not run");
            {
              py::gil_scoped_release release;
              r = l.accept(n_peers, host::Millis(static_cast<int64_t>(timeout_s * 1e3)));
            }
            return unix_channel(std::move(r));
          },
          py::arg("n_peers"), py::arg("timeout_s") = 30.0,
          "Admits n_peers peers (ranks 1..n in order of arrival) and returns the leader's channel (rank 0).\n"
          "Raises EngramError(timeout) naming how many joined.")
      .def("unlink", [](host::GroupListener& l) { check(l.unlink_socket()); },
           "Removes the socket path (no new peer can find the group).")
      .def_property_readonly("rejections", &host::GroupListener::rejections);

  py::class_<PyCallbackChannel, host::GroupChannel>(m, "_CallbackChannel")
      .def(py::init([](py::object impl) { return std::make_unique<PyCallbackChannel>(std::move(impl)); }),
           py::arg("impl"));

}

}  // namespace engram::py_bind
