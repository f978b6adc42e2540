// The CUDA-only calls of an Engine (engram/engine.hpp: prepare_device, write_ids, main_wait_event, last_launch,
// the streams, the device, step hashing) are the backend's DeviceQueue extension: an engine whose backend has none
// (cpu) answers kUnsupported naming the call, null streams and device -1 itself, and its queue and direct lookups
// work as before.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engram/engine.hpp"

using namespace engram;

TEST(EngineDeviceQueue, ACpuEngineAnswersTheCudaCallsItself) {
  auto layout = make_preset_layout("tiny");
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EngineOptions o;
  o.backend = BackendKind::kCpu;
  o.lookup_threads = 1;
  o.content.kind = TableContent::Kind::kZero;
  o.table.group = "device-queue";
  auto e = Engine::create_local(*layout, o);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  Engine& engine = **e;
  EXPECT_EQ(engine.main_stream(), nullptr);
  EXPECT_EQ(engine.prefetch_stream(), nullptr);
  EXPECT_EQ(engine.device(), -1);
  const int64_t id = 0;
  const Status s = engine.prepare_device(0, &id, 1);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("prepare_device"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cpu"), std::string::npos) << s.message();
  EXPECT_EQ(engine.write_ids(0, &id, 1).code(), Code::kUnsupported);
  EXPECT_EQ(engine.main_wait_event(nullptr).code(), Code::kUnsupported);
  EXPECT_EQ(engine.last_launch(0).status().code(), Code::kUnsupported);
  EXPECT_EQ(engine.hash_and_prepare(nullptr, nullptr, 0).code(), Code::kUnsupported);
  EXPECT_EQ(engine.hash_chunks_and_prepare(nullptr, nullptr, nullptr, nullptr, 0).code(), Code::kUnsupported);
  EXPECT_EQ(engine.last_device_hash(false).status().code(), Code::kUnsupported);
  // The calls every backend has still work: one direct lookup of zero pages.
  const int heads = layout->heads();
  std::vector<int64_t> ids(static_cast<size_t>(heads), 0);
  std::vector<uint16_t> out(static_cast<size_t>(heads) * static_cast<size_t>(layout->d), 0xFFFF);
  auto r = engine.lookup(0, ids.data(), 1, out.data());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launch.path, "cpu");
  for (uint16_t v : out) ASSERT_EQ(v, 0);
  EXPECT_TRUE(engine.synchronize().is_ok());
}
