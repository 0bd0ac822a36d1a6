#include "discovery/worker_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infera::discovery {
namespace {

std::string Record(const std::string& id, const std::string& model = "m") {
  WorkerRecord r;
  r.worker_id = id;
  r.url = "http://" + id;
  r.model_name = model;
  return SerializeWorkerRecord(r);
}

class WorkerTableTest : public ::testing::Test {
 protected:
  WorkerTableTest() : table_(Callbacks()) {}

  DiscoveryCallbacks Callbacks() {
    DiscoveryCallbacks c;
    c.on_added = [this](const WorkerRecord& r) { log_.push_back("+" + r.worker_id); };
    c.on_updated = [this](const WorkerRecord& r) {
      log_.push_back("~" + r.worker_id + "/" + r.model_name);
    };
    c.on_removed = [this](const std::string& id) { log_.push_back("-" + id); };
    return c;
  }
  std::vector<std::string> TakeLog() { return std::exchange(log_, {}); }

  std::vector<std::string> log_;
  WorkerTable table_;
};

using Log = std::vector<std::string>;

TEST_F(WorkerTableTest, PutUpdateDelete) {
  EXPECT_TRUE(table_.ApplyPut("/w/a:1", Record("a:1")).ok());
  EXPECT_TRUE(table_.ApplyPut("/w/a:1", Record("a:1")).ok());  // same value: silent
  EXPECT_TRUE(table_.ApplyPut("/w/a:1", Record("a:1", "m2")).ok());
  table_.ApplyDelete("/w/a:1");
  table_.ApplyDelete("/w/a:1");  // unknown key: silent
  EXPECT_EQ(TakeLog(), (Log{"+a:1", "~a:1/m2", "-a:1"}));
  EXPECT_EQ(table_.size(), 0u);
}

TEST_F(WorkerTableTest, InvalidValueRemovesWorkerUnderKey) {
  ASSERT_TRUE(table_.ApplyPut("/w/a:1", Record("a:1")).ok());
  absl::Status s = table_.ApplyPut("/w/a:1", "{not json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TakeLog(), (Log{"+a:1", "-a:1"}));
}

TEST_F(WorkerTableTest, WorkerIdChangeUnderSameKeyIsRemoveThenAdd) {
  ASSERT_TRUE(table_.ApplyPut("/w/x", Record("a:1")).ok());
  ASSERT_TRUE(table_.ApplyPut("/w/x", Record("b:2")).ok());
  EXPECT_EQ(TakeLog(), (Log{"+a:1", "-a:1", "+b:2"}));
}

TEST_F(WorkerTableTest, DuplicateWorkerIdUnderAnotherKeyIsRejected) {
  ASSERT_TRUE(table_.ApplyPut("/w/a:1", Record("a:1")).ok());
  EXPECT_EQ(table_.ApplyPut("/w/other", Record("a:1")).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(TakeLog(), (Log{"+a:1"}));
  EXPECT_EQ(table_.Workers().size(), 1u);
}

TEST_F(WorkerTableTest, ReplaceAllReportsOnlyTheDifference) {
  ASSERT_TRUE(table_.ApplyPut("/w/a:1", Record("a:1")).ok());
  ASSERT_TRUE(table_.ApplyPut("/w/b:2", Record("b:2")).ok());
  ASSERT_TRUE(table_.ApplyPut("/w/c:3", Record("c:3")).ok());
  TakeLog();
  std::vector<EtcdKv> snapshot = {
      {"/w/a:1", Record("a:1"), 10, 0},         // unchanged
      {"/w/c:3", Record("c:3", "new"), 11, 0},  // changed
      {"/w/d:4", Record("d:4"), 12, 0},         // new
      {"/w/e", "garbage", 13, 0},               // invalid
  };                                            // b:2 gone
  auto errors = table_.ReplaceAll(snapshot);
  EXPECT_EQ(errors.size(), 1u);
  EXPECT_EQ(TakeLog(), (Log{"-b:2", "~c:3/new", "+d:4"}));
  auto workers = table_.Workers();
  EXPECT_EQ(workers.size(), 3u);
  EXPECT_TRUE(workers.contains("a:1") && workers.contains("c:3") && workers.contains("d:4"));
}

}  // namespace
}  // namespace infera::discovery
