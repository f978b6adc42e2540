// Serving metrics from the CLI (`engram run`, `engram serve-table`): --metrics-port serves GET /metrics in the
// Prometheus text format on 127.0.0.1 only (cpp-httplib, one server thread) while the command runs;
// --metrics-file writes the final snapshot atomically (temp file in the same directory, then rename).
// Both are checked before any work: a bad port number or file path exits 2 with nothing written; a port that
// cannot be bound (in use) exits 1 with the port named.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "engram/status.hpp"

namespace engram::cli {

struct MetricsArgs {
  int port = -1;      // -1: no server; 0: any free port (printed on stderr)
  std::string file;   // "": no file
};

void add_metrics_options(CLI::App& sub, MetricsArgs& a);
// The file path as every output file is checked (sys::check_output_path: not a directory or FIFO, its directory
// exists and takes a new file).
// kInvalidArgument naming the option otherwise.
Status check_metrics_args(const MetricsArgs& a);

class MetricsServer {
 public:
  // Binds 127.0.0.1:port and serves GET /metrics with render() from a thread of its own (render is called on that
  // thread). kIo naming the port when it cannot be bound (in use, no permission).
  static Result<std::unique_ptr<MetricsServer>> start(int port, std::function<std::string()> render);
  ~MetricsServer();  // stops the server and joins its thread
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// The server when a.port >= 0 (null otherwise), announced on stderr as "metrics at http://127.0.0.1:P/metrics".
Result<std::unique_ptr<MetricsServer>> start_metrics_server(const std::string& command, const MetricsArgs& a,
                                                            std::function<std::string()> render);
// Writes `text` to a.file atomically when a.file is set.
Status write_metrics_file(const MetricsArgs& a, const std::string& text);

}  // namespace engram::cli
