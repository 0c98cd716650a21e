// Workspace (ops/workspace.h): stack allocation over the arena and the overflow chunks.
#include <gtest/gtest.h>

#include "ops/workspace.h"

namespace vllm {
namespace test_workspace {
namespace {

TEST(Workspace, ScopesReuseOverflowChunksWithinAStep) {
  Workspace ws(Device::cpu());
  ASSERT_TRUE(ws.reset().is_ok());
  EXPECT_EQ(ws.capacity(), 0u);
  const void* first = nullptr;
  for (int layer = 0; layer < 3; ++layer) {
    WorkspaceScope scope(&ws);
    auto a = ws.allocate({1024, 1024}, DType::kF32);  // 4 MiB: past the (empty) arena
    ASSERT_TRUE(a.has_value());
    if (layer == 0) first = a->data_ptr();
    // A released scope's overflow memory is handed out again, not allocated anew.
    EXPECT_EQ(a->data_ptr(), first);
    auto b = ws.allocate({16}, DType::kF32);  // into the next chunk
    ASSERT_TRUE(b.has_value());
    EXPECT_NE(b->data_ptr(), a->data_ptr());
  }
  EXPECT_EQ(ws.used(), 0u);
  EXPECT_EQ(ws.high_water(), size_t{4 << 20} + Workspace::kAlignment);
  // The next step gets one arena of the high-water mark.
  ASSERT_TRUE(ws.reset().is_ok());
  EXPECT_EQ(ws.capacity(), size_t{4 << 20} + Workspace::kAlignment);
  auto a = ws.allocate({1024, 1024}, DType::kF32);
  auto b = ws.allocate({16}, DType::kF32);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(static_cast<const char*>(b->data_ptr()),
            static_cast<const char*>(a->data_ptr()) + (4 << 20));
  auto empty = ws.allocate({0}, DType::kF32);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->numel(), 0);
}

TEST(Workspace, ClaimedBytesAreNotHandedOutAgain) {
  Workspace ws(Device::cpu());
  ASSERT_TRUE(ws.reserve(4096).is_ok());
  auto first = ws.allocate({64}, DType::kF32);  // 256 bytes
  ASSERT_TRUE(first.has_value());
  ws.claim(2048);  // as after a graph replay that ended with 2048 bytes in use
  EXPECT_EQ(ws.used(), 2048u);
  auto next = ws.allocate({64}, DType::kF32);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(static_cast<const char*>(next->data_ptr()),
            static_cast<const char*>(first->data_ptr()) + 2048);
}

TEST(Workspace, FrozenRefusesToOverflow) {
  Workspace ws(Device::cpu());
  ASSERT_TRUE(ws.reserve(1024).is_ok());
  ws.freeze(true);
  EXPECT_TRUE(ws.allocate({128}, DType::kF32).has_value());
  EXPECT_FALSE(ws.allocate({1024}, DType::kF32).has_value());
}

}  // namespace
}  // namespace test_workspace
}  // namespace vllm
