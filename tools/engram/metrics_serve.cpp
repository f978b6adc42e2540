// --metrics-port / --metrics-file (see metrics_serve.hpp). The HTTP server is cpp-httplib (Debian
// libcpp-httplib-dev: its header and libcpp-httplib.so), bound to the loopback address: metrics name table paths
// and group names, and an operator's Prometheus scrapes them on the same host or through its own proxy.
#include "metrics_serve.hpp"

#include <httplib.h>

#include <cstdio>
#include <thread>

#include "args.hpp"
#include "engram/metrics.hpp"
#include "sys/file.hpp"
#include "sys/process.hpp"
#include "sys/unix_socket.hpp"

namespace engram::cli {

void add_metrics_options(CLI::App& sub, MetricsArgs& a) {
  sub.add_option("--metrics-port", a.port,
                 "Serve GET /metrics (Prometheus text format) on 127.0.0.1:PORT while the command runs; 0 = any free "
                 "port (printed on stderr); docs/metrics.md")
      ->check(range(0, 65535));
  sub.add_option("--metrics-file", a.file, "Write the final metrics snapshot (Prometheus text format) to this file")
      ->check(output_file());
}

Status check_metrics_args(const MetricsArgs& a) {
  if (a.file.empty()) return Status::ok();
  return sys::check_output_path(a.file, sys::OutputKind::kFile).with_context("--metrics-file");
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(int port, std::function<std::string()> render) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->impl_ = std::make_unique<Impl>();
  httplib::Server& srv = s->impl_->server;
  srv.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), kPrometheusContentType);
  });
  srv.set_keep_alive_max_count(1);
  // cpp-httplib's default also sets SO_REUSEPORT, which would let a second engram bind the same port and take half of
  // the scrapes: address reuse only.
  srv.set_socket_options([](socket_t fd) { (void)sys::set_reuse_address(fd); });
  // bind_to_port also listens: a scrape that arrives before the thread accepts waits in the backlog.
  if (port == 0) {
    const int p = srv.bind_to_any_port("127.0.0.1");
    if (p <= 0) return Status(Code::kIo, "--metrics-port 0: cannot bind any port on 127.0.0.1");
    s->port_ = p;
  } else {
    if (!srv.bind_to_port("127.0.0.1", port))
      return Status(Code::kIo, "--metrics-port " + std::to_string(port) +
                                   ": cannot bind 127.0.0.1:" + std::to_string(port) + " (in use?)");
    s->port_ = port;
  }
  s->impl_->thread = sys::start_thread_without_stop_signals([&srv] { srv.listen_after_bind(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::unique_ptr<MetricsServer>> start_metrics_server(const std::string& command, const MetricsArgs& a,
                                                            std::function<std::string()> render) {
  if (a.port < 0) return std::unique_ptr<MetricsServer>();
  ENGRAM_ASSIGN_OR_RETURN(auto server, MetricsServer::start(a.port, std::move(render)));
  std::fprintf(stderr, "engram %s: metrics at http://127.0.0.1:%d/metrics\n", command.c_str(), server->port());
  return server;
}

Status write_metrics_file(const MetricsArgs& a, const std::string& text) {
  if (a.file.empty()) return Status::ok();
  const std::string tmp = a.file + ".tmp." + std::to_string(sys::process_id());
  ENGRAM_RETURN_IF_ERROR(sys::write_new_file(tmp, text).with_context("--metrics-file"));
  Status s = sys::rename_path(tmp, a.file, /*replace=*/true);
  if (!s.is_ok()) {
    (void)sys::unlink_path(tmp);
    return s.with_context("--metrics-file");
  }
  return Status::ok();
}

}  // namespace engram::cli
