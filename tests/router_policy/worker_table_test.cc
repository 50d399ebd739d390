#include "services/router_policy/worker_table.h"

#include <gtest/gtest.h>

namespace ced::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

WorkerInfo Decode(const std::string& id, int64_t blocks = 100) {
  return WorkerInfo{id, Role::kDecode, WeightsHeld::kFull, blocks, 16};
}

WorkerInfo Prefill(const std::string& id) {
  return WorkerInfo{id, Role::kPrefill, WeightsHeld::kEncoderOnly, 0, 0};
}

WorkerLoad LoadAt(absl::Time t, int64_t free_blocks = 50) {
  WorkerLoad load;
  load.free_kv_blocks = free_blocks;
  load.last_heartbeat = t;
  return load;
}

class WorkerTableTest : public ::testing::Test {
 protected:
  WorkerTable table_{WorkerTable::Options{absl::Seconds(5)}};
};

TEST_F(WorkerTableTest, RegisterValidates) {
  EXPECT_EQ(table_.Register(Prefill(""), kT0).code(), absl::StatusCode::kInvalidArgument);
  WorkerInfo partial = Decode("d0");
  partial.weights = WeightsHeld::kEncoderReplay;
  EXPECT_EQ(table_.Register(partial, kT0).code(), absl::StatusCode::kInvalidArgument);
  WorkerInfo no_blocks = Decode("d0");
  no_blocks.block_size = 0;
  EXPECT_EQ(table_.Register(no_blocks, kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_.Register(Decode("d0", -1), kT0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_.Snapshot(kT0).empty());
}

TEST_F(WorkerTableTest, RegisterCountsAsHeartbeatWithAllBlocksFree) {
  ASSERT_TRUE(table_.Register(Decode("d0", 80), kT0).ok());
  auto states = table_.Snapshot(kT0 + absl::Seconds(1));
  ASSERT_EQ(states.size(), 1u);
  EXPECT_TRUE(states[0].live);
  EXPECT_EQ(states[0].load.free_kv_blocks, 80);
}

TEST_F(WorkerTableTest, SnapshotIsSortedById) {
  for (const char* id : {"p2", "d1", "p0", "d0"})
    ASSERT_TRUE(table_.Register(Prefill(id), kT0).ok());
  auto states = table_.Snapshot(kT0);
  ASSERT_EQ(states.size(), 4u);
  EXPECT_EQ(states[0].info.id, "d0");
  EXPECT_EQ(states[1].info.id, "d1");
  EXPECT_EQ(states[2].info.id, "p0");
  EXPECT_EQ(states[3].info.id, "p2");
}

TEST_F(WorkerTableTest, UpdateUnknownIsNotFound) {
  EXPECT_EQ(table_.Update("ghost", LoadAt(kT0)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Remove("ghost").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.AddPending("ghost", PendingWork{1, 1, 1}).code(), absl::StatusCode::kNotFound);
}

TEST_F(WorkerTableTest, UpdateClearsPendingWork) {
  ASSERT_TRUE(table_.Register(Decode("d0"), kT0).ok());
  ASSERT_TRUE(table_.AddPending("d0", PendingWork{10, 3, 1}).ok());
  ASSERT_TRUE(table_.AddPending("d0", PendingWork{5, 2, 1}).ok());
  auto states = table_.Snapshot(kT0);
  EXPECT_EQ(states[0].pending.prefill_tokens, 15);
  EXPECT_EQ(states[0].pending.kv_blocks, 5);
  EXPECT_EQ(states[0].pending.sequences, 2);

  ASSERT_TRUE(table_.Update("d0", LoadAt(kT0 + absl::Seconds(1), 42)).ok());
  states = table_.Snapshot(kT0 + absl::Seconds(1));
  EXPECT_EQ(states[0].pending.prefill_tokens, 0);
  EXPECT_EQ(states[0].pending.kv_blocks, 0);
  EXPECT_EQ(states[0].load.free_kv_blocks, 42);
}

TEST_F(WorkerTableTest, OlderReportIsIgnored) {
  ASSERT_TRUE(table_.Register(Decode("d0"), kT0).ok());
  ASSERT_TRUE(table_.Update("d0", LoadAt(kT0 + absl::Seconds(2), 30)).ok());
  ASSERT_TRUE(table_.Update("d0", LoadAt(kT0 + absl::Seconds(1), 90)).ok());
  EXPECT_EQ(table_.Snapshot(kT0 + absl::Seconds(2))[0].load.free_kv_blocks, 30);
}

TEST_F(WorkerTableTest, StaleAfterTimeoutAndRejoinsOnReport) {
  ASSERT_TRUE(table_.Register(Prefill("p0"), kT0).ok());
  ASSERT_TRUE(table_.Register(Prefill("p1"), kT0).ok());
  const absl::Time t1 = kT0 + absl::Seconds(4);
  ASSERT_TRUE(table_.Update("p1", LoadAt(t1)).ok());

  const absl::Time t2 = kT0 + absl::Seconds(6);
  EXPECT_TRUE(table_.Snapshot(kT0 + absl::Seconds(5))[0].live);  // age == timeout: live
  auto states = table_.Snapshot(t2);
  EXPECT_FALSE(states[0].live);
  EXPECT_TRUE(states[1].live);
  EXPECT_EQ(table_.MarkStale(t2), std::vector<std::string>{"p0"});
  EXPECT_TRUE(table_.MarkStale(t2).empty());  // reported once

  ASSERT_TRUE(table_.Update("p0", LoadAt(t2)).ok());
  EXPECT_TRUE(table_.Snapshot(t2)[0].live);
  EXPECT_TRUE(table_.MarkStale(t2).empty());
  EXPECT_EQ(table_.MarkStale(t2 + absl::Seconds(10)), (std::vector<std::string>{"p0", "p1"}));
}

TEST_F(WorkerTableTest, ReRegisterResetsLoadAndRemoveForgets) {
  ASSERT_TRUE(table_.Register(Decode("d0", 100), kT0).ok());
  ASSERT_TRUE(table_.Update("d0", LoadAt(kT0 + absl::Seconds(1), 7)).ok());
  ASSERT_TRUE(table_.AddPending("d0", PendingWork{0, 3, 1}).ok());
  ASSERT_TRUE(table_.Register(Decode("d0", 200), kT0 + absl::Seconds(2)).ok());
  auto states = table_.Snapshot(kT0 + absl::Seconds(2));
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].load.free_kv_blocks, 200);
  EXPECT_EQ(states[0].pending.kv_blocks, 0);
  ASSERT_TRUE(table_.Remove("d0").ok());
  EXPECT_TRUE(table_.Snapshot(kT0).empty());
}

}  // namespace
}  // namespace ced::router
