// The books of the CUDA allocator's graph pools (GraphPoolBook, src/core/block_cache.h), on fake
// block addresses: what CudaGraph relies on so that no tensor outside a graph is ever handed a
// block a replay rewrites.
#include <gtest/gtest.h>

#include <algorithm>

#include "src/core/block_cache.h"

using namespace hpcnet;

namespace {
void* block(uintptr_t n) { return reinterpret_cast<void*>(n * 4096); }
}  // namespace

TEST(GraphPoolBook, OutsideACaptureNothingIsThePools) {
  GraphPoolBook b;
  EXPECT_EQ(b.take(512), nullptr);
  b.handed_out(block(1));
  EXPECT_FALSE(b.give_back(block(1), 512));  // for the shared lists
}

TEST(GraphPoolBook, ACapturesBlocksStayThePoolsAfterItEnds) {
  GraphPoolBook b;
  const int id = b.begin();
  EXPECT_EQ(b.take(512), nullptr);  // an empty pool: the block comes from elsewhere
  b.handed_out(block(1));
  b.handed_out(block(2));
  EXPECT_TRUE(b.give_back(block(1), 512));  // freed inside the capture: back to the pool
  EXPECT_EQ(b.take(512), block(1));         // and reused by the same capture
  EXPECT_EQ(b.take(512), nullptr);
  EXPECT_TRUE(b.give_back(block(1), 512));
  b.end();
  // After the capture: no one else gets the pool's blocks, and freeing one keeps it in the pool.
  EXPECT_EQ(b.take(512), nullptr);
  EXPECT_TRUE(b.give_back(block(2), 1024));
  b.handed_out(block(3));  // an allocation after the capture is not the pool's
  EXPECT_FALSE(b.give_back(block(3), 512));
  // Release: the free blocks come back for the shared lists; later frees go there too.
  auto back = b.release(id);
  std::sort(back.begin(), back.end());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0], std::make_pair(block(1), size_t{512}));
  EXPECT_EQ(back[1], std::make_pair(block(2), size_t{1024}));
  EXPECT_FALSE(b.give_back(block(1), 512));
  EXPECT_TRUE(b.owner.empty());
  EXPECT_TRUE(b.release(id).empty());  // twice: nothing
}

TEST(GraphPoolBook, APoolInUseAtReleaseLetsItsBlocksGoWhenFreed) {
  GraphPoolBook b;
  const int first = b.begin();
  b.handed_out(block(1));  // still in use when the pool is released (a gradient, say)
  b.end();
  const int second = b.begin();
  EXPECT_NE(first, second);
  b.handed_out(block(2));
  EXPECT_TRUE(b.give_back(block(2), 512));
  EXPECT_EQ(b.take(512), block(2));  // a capture takes only its own pool's blocks
  EXPECT_TRUE(b.release(first).empty());
  EXPECT_FALSE(b.give_back(block(1), 512));  // the first pool's block: to the shared lists
  EXPECT_EQ(b.capturing, second);  // releasing another pool leaves the capture open
  EXPECT_TRUE(b.give_back(block(2), 512));
}
