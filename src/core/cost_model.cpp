// Named transfer paths for `engram model` (figures and their sources; see cost_model.hpp).
#include "core/cost_model.hpp"

namespace engram::cost_model {

const std::vector<NamedPath>& named_paths() {
  static const std::vector<NamedPath> kPaths = {
      {"pcie4-pinned", 25e9, "PCIe 4.0 x16 from pinned memory, practical"},
      {"pcie4-pageable", 12e9, "PCIe 4.0 x16 from pageable memory (staged through a pinned buffer)"},
      {"pcie5-pinned", 50e9, "PCIe 5.0 x16 from pinned memory, practical"},
      {"nvlink-c2c", 450e9, "NVLink-C2C (Grace Hopper CPU to GPU)"},
      {"rdma-400g", 45e9, "400 Gb/s NIC reading remote memory (GPUDirect RDMA)"},
      {"h200-pinned", 55.4e9, "H2D pinned copy measured on the H200 machine"},
      {"h200-pageable", 7.2e9, "H2D pageable copy measured on the H200 machine"},
  };
  return kPaths;
}

}  // namespace engram::cost_model
