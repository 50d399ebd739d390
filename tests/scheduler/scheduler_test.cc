// The decode scheduler against a fake executor and a fake clock: admission,
// batch limits, the token budget, cancellation, K/V gating, timeouts and
// fairness. Deterministic: no threads, no sleeps, no wall clock.
#include "engine/scheduler/scheduler.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const SchedulerTime kT0 = SchedulerTime{} + std::chrono::hours(1);

// Runs plans as an engine would: a completed start makes the first token, a
// decode one more; a request finishes after its `output` tokens. Records
// what ran.
class FakeExecutor {
 public:
  void SetOutput(const std::string& id, int tokens) { output_[id] = tokens; }
  StepResult Run(const StepPlan& plan) {
    StepResult result;
    for (const StartWork& s : plan.start) {
      started_tokens_[s.id] += s.tokens;
      if (s.completes) {
        start_order_.push_back(s.id);
        Emit(s.id, &result);
      }
    }
    for (const std::string& id : plan.decode) Emit(id, &result);
    return result;
  }
  int generated(const std::string& id) const {
    auto it = generated_.find(id);
    return it == generated_.end() ? 0 : it->second;
  }
  int64_t started_tokens(const std::string& id) const {
    auto it = started_tokens_.find(id);
    return it == started_tokens_.end() ? 0 : it->second;
  }
  const std::vector<std::string>& start_order() const { return start_order_; }
  const std::vector<std::string>& finish_order() const { return finish_order_; }

 private:
  void Emit(const std::string& id, StepResult* result) {
    const int n = ++generated_[id];
    auto it = output_.find(id);
    if (n >= (it == output_.end() ? 1000000 : it->second)) {
      result->finished.push_back(id);
      finish_order_.push_back(id);
    }
  }
  std::map<std::string, int> output_, generated_;
  std::map<std::string, int64_t> started_tokens_;
  std::vector<std::string> start_order_, finish_order_;
};

std::unique_ptr<Scheduler> Make(SchedulerOptions o) {
  auto s = Scheduler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// A local-prefill request, admitted, activated and attached: ready.
void AddLocal(Scheduler* s, const std::string& id, int64_t work, SchedulerTime now = kT0) {
  ASSERT_TRUE(s->Add({id, work, /*awaits_kv=*/false}, now).ok());
  ASSERT_TRUE(s->Activate(id, work).ok());
  s->Attach(id);
}

// A request whose K/V comes from a prefill worker, attached, K/V not landed.
void AddRemote(Scheduler* s, const std::string& id, int64_t prompt, SchedulerTime now = kT0) {
  ASSERT_TRUE(s->Add({id, prompt, /*awaits_kv=*/true}, now).ok());
  ASSERT_TRUE(s->Activate(id, 0).ok());
  s->Attach(id);
}

std::vector<std::string> StartIds(const StepPlan& p) {
  std::vector<std::string> ids;
  for (const StartWork& w : p.start) ids.push_back(w.id);
  return ids;
}

std::vector<std::string> EndedIds(const StepPlan& p) {
  std::vector<std::string> ids;
  for (const EndedRequest& e : p.ended) ids.push_back(e.id);
  return ids;
}

// Schedule + execute + Update.
StepPlan Step(Scheduler* s, FakeExecutor* x, SchedulerTime now = kT0) {
  StepPlan plan = s->Schedule(now);
  s->Update(x->Run(plan));
  return plan;
}

TEST(SchedulerTest, CreateRejectsBadOptions) {
  SchedulerOptions o;
  o.max_batch = 0;
  EXPECT_EQ(Scheduler::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.max_step_tokens = 0;
  EXPECT_EQ(Scheduler::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.kv_timeout = milliseconds(-1);
  EXPECT_EQ(Scheduler::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Scheduler::Create({}).ok());
}

TEST(SchedulerTest, StartsInAdmissionOrderNotIdOrder) {
  auto s = Make({});
  for (const char* id : {"c", "a", "b"}) AddLocal(s.get(), id, 10);
  StepPlan p = s->Schedule(kT0);
  EXPECT_THAT(StartIds(p), ElementsAre("c", "a", "b"));
  EXPECT_THAT(p.decode, IsEmpty());
  s->Update({});
  // Started sequences decode from the next step, in the same order.
  p = s->Schedule(kT0);
  EXPECT_THAT(p.decode, ElementsAre("c", "a", "b"));
  EXPECT_THAT(p.start, IsEmpty());
  EXPECT_EQ(s->running(), 3);
}

TEST(SchedulerTest, AddRejectsDuplicatesAndPastQueueBounds) {
  SchedulerOptions o;
  o.max_queued_requests = 2;
  o.max_queued_tokens = 100;
  auto s = Make(o);
  AddRejection why;
  ASSERT_TRUE(s->Add({"a", 40, false}, kT0, &why).ok());
  EXPECT_EQ(why, AddRejection::kNone);
  ASSERT_TRUE(s->Activate("a", 40).ok());
  EXPECT_EQ(s->Add({"a", 1, false}, kT0, &why).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(why, AddRejection::kDuplicate);
  // 40 + 61 > 100.
  EXPECT_EQ(s->Add({"b", 61, false}, kT0, &why).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(why, AddRejection::kQueueTokens);
  ASSERT_TRUE(s->Add({"b", 60, false}, kT0, &why).ok());
  EXPECT_EQ(s->queued_requests(), 2);
  EXPECT_EQ(s->queued_tokens(), 100);
  EXPECT_EQ(s->admitting(), 1);
  EXPECT_EQ(s->Add({"c", 0, false}, kT0, &why).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(why, AddRejection::kQueueRequests);

  // A cancelled request leaves the queue at once; a running one leaves it
  // once started; a removed one (failed admission) leaves it too.
  EXPECT_TRUE(s->Cancel("a", "bye"));
  EXPECT_EQ(s->queued_requests(), 1);
  EXPECT_EQ(s->queued_tokens(), 60);
  ASSERT_TRUE(s->Activate("b", 60).ok());
  s->Attach("b");
  ASSERT_TRUE(s->Add({"c", 40, false}, kT0).ok());
  FakeExecutor x;
  Step(s.get(), &x);  // ends a, starts b
  EXPECT_EQ(s->running(), 1);
  EXPECT_EQ(s->queued_requests(), 1);  // c, still admitting
  EXPECT_EQ(s->queued_tokens(), 40);
  s->Remove("c");
  EXPECT_EQ(s->queued_requests(), 0);
  EXPECT_EQ(s->admitting(), 0);
  EXPECT_TRUE(s->Add({"c", 100, false}, kT0).ok());
}

TEST(SchedulerTest, BatchLimitHoldsAndFreedSlotsGoFifo) {
  SchedulerOptions o;
  o.max_batch = 2;
  auto s = Make(o);
  FakeExecutor x;
  for (const char* id : {"a", "b", "c", "d", "e"}) AddLocal(s.get(), id, 5);
  x.SetOutput("a", 3);  // first token + 2 decode steps
  x.SetOutput("b", 10);
  StepPlan p = Step(s.get(), &x);
  EXPECT_THAT(StartIds(p), ElementsAre("a", "b"));
  p = Step(s.get(), &x);
  EXPECT_THAT(p.decode, ElementsAre("a", "b"));
  EXPECT_THAT(p.start, IsEmpty());
  p = Step(s.get(), &x);  // a finishes in this step
  EXPECT_THAT(p.decode, ElementsAre("a", "b"));
  EXPECT_THAT(x.finish_order(), ElementsAre("a"));
  p = Step(s.get(), &x);  // its slot goes to c, the oldest waiting
  EXPECT_THAT(p.decode, ElementsAre("b"));
  EXPECT_THAT(StartIds(p), ElementsAre("c"));
  EXPECT_EQ(s->running(), 2);
  EXPECT_EQ(s->waiting(), 2);
}

TEST(SchedulerTest, BudgetMixesStartWorkWithDecodeAtomic) {
  SchedulerOptions o;
  o.max_step_tokens = 100;
  o.max_batch = 64;
  auto s = Make(o);
  FakeExecutor x;
  for (int i = 0; i < 30; ++i) AddLocal(s.get(), "r" + std::to_string(i), 0);
  Step(s.get(), &x);  // 30 running, no work
  ASSERT_EQ(s->running(), 30);
  AddLocal(s.get(), "p50", 50);
  AddLocal(s.get(), "p10", 10);
  AddLocal(s.get(), "p30", 30);  // 30 + 50 + 10 + 30 > 100: waits
  AddLocal(s.get(), "p0", 0);    // fits, but does not overtake p30
  StepPlan p = Step(s.get(), &x);
  EXPECT_EQ(p.decode.size(), 30u);
  EXPECT_THAT(StartIds(p), ElementsAre("p50", "p10"));
  EXPECT_EQ(p.start_tokens, 60);
  EXPECT_EQ(p.budget_tokens(), 90);
  p = Step(s.get(), &x);
  EXPECT_EQ(p.decode.size(), 32u);
  EXPECT_THAT(StartIds(p), ElementsAre("p30", "p0"));
  EXPECT_EQ(p.budget_tokens(), 62);
}

TEST(SchedulerTest, FirstStartOfAStepMayExceedTheBudget) {
  SchedulerOptions o;
  o.max_step_tokens = 100;
  auto s = Make(o);
  FakeExecutor x;
  AddLocal(s.get(), "big", 500);
  AddLocal(s.get(), "small", 1);
  StepPlan p = Step(s.get(), &x);
  EXPECT_THAT(StartIds(p), ElementsAre("big"));  // alone: a prompt longer than the budget
  EXPECT_TRUE(p.start[0].completes);
  p = Step(s.get(), &x);
  EXPECT_THAT(StartIds(p), ElementsAre("small"));
  EXPECT_THAT(p.decode, ElementsAre("big"));
}

TEST(SchedulerTest, ChunkedStartSplitsWorkAndNeverStarvesDecode) {
  SchedulerOptions o;
  o.max_step_tokens = 64;
  o.chunked_start = true;
  o.min_chunk_tokens = 8;
  auto s = Make(o);
  FakeExecutor x;
  for (int i = 0; i < 10; ++i) AddLocal(s.get(), "d" + std::to_string(i), 0);
  Step(s.get(), &x);
  ASSERT_EQ(s->running(), 10);
  AddLocal(s.get(), "long", 200);
  std::vector<int64_t> chunks;
  for (int step = 0; step < 10 && s->running() < 11; ++step) {
    StepPlan p = Step(s.get(), &x);
    EXPECT_EQ(p.decode.size(), 10u) << "step " << step;
    EXPECT_LE(p.budget_tokens(), 64) << "step " << step;
    ASSERT_THAT(StartIds(p), ElementsAre("long"));
    chunks.push_back(p.start[0].tokens);
    EXPECT_EQ(p.start[0].completes, x.started_tokens("long") == 200);
  }
  // 54 per step (64 - 10 decode tokens): 54 + 54 + 54 + 38.
  EXPECT_THAT(chunks, ElementsAre(54, 54, 54, 38));
  EXPECT_EQ(x.generated("long"), 1);  // its first token, after the last chunk
  EXPECT_EQ(s->running(), 11);

  // Decode alone past the budget: start work still gets min_chunk_tokens.
  for (int i = 0; i < 53; ++i) AddLocal(s.get(), "e" + std::to_string(i), 0);
  Step(s.get(), &x);
  ASSERT_EQ(s->running(), 64);
  AddLocal(s.get(), "late", 20);
  StepPlan p = s->Schedule(kT0);
  EXPECT_THAT(StartIds(p), IsEmpty());  // no slot: max_batch 64
  s->Update({{"e0"}});                  // e0 finished
  p = s->Schedule(kT0);
  ASSERT_THAT(StartIds(p), ElementsAre("late"));
  EXPECT_EQ(p.start[0].tokens, 8);  // 64 - 63 decode tokens leave 1
  EXPECT_FALSE(p.start[0].completes);
  s->Update({});
  // A started chunk holds its batch slot: the newcomer gets none.
  AddLocal(s.get(), "later", 0);
  p = s->Schedule(kT0);
  EXPECT_THAT(StartIds(p), ElementsAre("late"));
  s->Update({});
  p = s->Schedule(kT0);
  ASSERT_THAT(StartIds(p), ElementsAre("late"));
  EXPECT_EQ(p.start[0].tokens, 4);
  EXPECT_TRUE(p.start[0].completes);
  s->Update({});
  EXPECT_EQ(s->running(), 64);
  EXPECT_EQ(s->waiting(), 1);
}

TEST(SchedulerTest, CancelBeforeActivationEndsOnceActivated) {
  auto s = Make({});
  FakeExecutor x;
  ASSERT_TRUE(s->Add({"a", 10, false}, kT0).ok());
  EXPECT_TRUE(s->Cancel("a", "client went away"));
  StepPlan p = Step(s.get(), &x);
  EXPECT_THAT(p.ended, IsEmpty());  // the admission is still in progress
  ASSERT_TRUE(s->Activate("a", 10).ok());
  s->Attach("a");
  p = Step(s.get(), &x);
  ASSERT_THAT(EndedIds(p), ElementsAre("a"));
  EXPECT_EQ(p.ended[0].reason, EndReason::kCancelled);
  EXPECT_EQ(p.ended[0].detail, "client went away");
  EXPECT_THAT(p.start, IsEmpty());
  EXPECT_FALSE(s->Contains("a"));
  EXPECT_FALSE(s->Cancel("a", "again"));
  EXPECT_FALSE(s->Cancel("never-seen", "x"));
}

TEST(SchedulerTest, CancelWhileWaitingRunningAndMidStep) {
  auto s = Make({});
  FakeExecutor x;
  AddRemote(s.get(), "waiting", 10);
  AddLocal(s.get(), "running", 10);
  Step(s.get(), &x);
  ASSERT_EQ(s->running(), 1);
  s->Cancel("waiting", "w");
  s->Cancel("running", "r");
  StepPlan p = Step(s.get(), &x);
  EXPECT_THAT(EndedIds(p), ElementsAre("waiting", "running"));
  EXPECT_THAT(p.decode, IsEmpty());
  EXPECT_EQ(s->running(), 0);
  EXPECT_EQ(s->waiting(), 0);

  // Cancelled while its start runs: it joins, then ends at the next step
  // without decoding.
  AddLocal(s.get(), "mid", 10);
  p = s->Schedule(kT0);
  ASSERT_THAT(StartIds(p), ElementsAre("mid"));
  s->Cancel("mid", "m");
  s->Update(x.Run(p));
  p = Step(s.get(), &x);
  EXPECT_THAT(EndedIds(p), ElementsAre("mid"));
  EXPECT_THAT(p.decode, IsEmpty());
  EXPECT_EQ(x.generated("mid"), 1);
}

TEST(SchedulerTest, StartsOnlyOnceKvLanded) {
  SchedulerOptions o;
  o.max_step_tokens = 100;
  auto s = Make(o);
  FakeExecutor x;
  AddRemote(s.get(), "kv", 1000);
  for (int i = 0; i < 3; ++i) {
    s->OnKvProgress("kv", kT0 + milliseconds(i));
    StepPlan p = Step(s.get(), &x, kT0 + milliseconds(i));
    EXPECT_THAT(p.start, IsEmpty());
  }
  EXPECT_EQ(s->waiting(), 1);
  // The replay it needs is its start work.
  s->OnKvLanded("kv", kT0 + milliseconds(5), 64);
  StepPlan p = Step(s.get(), &x, kT0 + milliseconds(5));
  ASSERT_THAT(StartIds(p), ElementsAre("kv"));
  EXPECT_EQ(p.start[0].tokens, 64);
  EXPECT_EQ(s->running(), 1);
}

TEST(SchedulerTest, LocalPrefillWaitsForItsConsumer) {
  auto s = Make({});
  FakeExecutor x;
  ASSERT_TRUE(s->Add({"a", 10, false}, kT0).ok());
  ASSERT_TRUE(s->Activate("a", 10).ok());
  EXPECT_THAT(Step(s.get(), &x).start, IsEmpty());
  s->Attach("a");
  EXPECT_THAT(StartIds(Step(s.get(), &x)), ElementsAre("a"));
  // A request awaiting K/V starts without a consumer (its tokens wait).
  ASSERT_TRUE(s->Add({"b", 10, true}, kT0).ok());
  ASSERT_TRUE(s->Activate("b", 0).ok());
  s->OnKvLanded("b", kT0, 0);
  EXPECT_THAT(StartIds(Step(s.get(), &x)), ElementsAre("b"));
}

TEST(SchedulerTest, KvTimeoutCountsFromLastProgress) {
  SchedulerOptions o;
  o.kv_timeout = milliseconds(100);
  o.attach_timeout = milliseconds(0);  // off: only the K/V timeout here
  auto s = Make(o);
  FakeExecutor x;
  AddRemote(s.get(), "slow", 10);
  EXPECT_THAT(Step(s.get(), &x, kT0 + milliseconds(100)).ended, IsEmpty());  // not past it
  s->OnKvProgress("slow", kT0 + milliseconds(90));
  EXPECT_THAT(Step(s.get(), &x, kT0 + milliseconds(150)).ended, IsEmpty());
  EXPECT_THAT(Step(s.get(), &x, kT0 + milliseconds(190)).ended, IsEmpty());
  StepPlan p = Step(s.get(), &x, kT0 + milliseconds(191));
  ASSERT_THAT(EndedIds(p), ElementsAre("slow"));
  EXPECT_EQ(p.ended[0].reason, EndReason::kKvTimeout);
  EXPECT_EQ(s->queued_requests(), 0);
}

TEST(SchedulerTest, RequestWhoseKvNeverLandsTimesOutAndOthersRun) {
  SchedulerOptions o;
  o.kv_timeout = milliseconds(1000);
  auto s = Make(o);
  FakeExecutor x;
  AddRemote(s.get(), "lost", 10);
  AddRemote(s.get(), "fine", 10);
  s->OnKvLanded("fine", kT0 + milliseconds(10), 0);
  x.SetOutput("fine", 1000);
  SchedulerTime t = kT0;
  std::vector<std::string> ended;
  for (int i = 0; i < 30; ++i, t += milliseconds(50)) {
    for (const EndedRequest& e : Step(s.get(), &x, t).ended) {
      ended.push_back(e.id);
      EXPECT_EQ(e.reason, EndReason::kKvTimeout);
    }
  }
  EXPECT_THAT(ended, ElementsAre("lost"));
  EXPECT_EQ(x.generated("fine"), 30);
  EXPECT_EQ(x.generated("lost"), 0);
  // Once running, the K/V timeout no longer applies.
  EXPECT_TRUE(s->Contains("fine"));
}

TEST(SchedulerTest, NeverAttachedEndsEvenWhenRunning) {
  SchedulerOptions o;
  o.attach_timeout = milliseconds(500);
  auto s = Make(o);
  FakeExecutor x;
  ASSERT_TRUE(s->Add({"a", 10, true}, kT0).ok());
  ASSERT_TRUE(s->Activate("a", 0).ok());
  s->OnKvLanded("a", kT0, 0);
  Step(s.get(), &x, kT0);
  EXPECT_EQ(s->running(), 1);
  EXPECT_THAT(Step(s.get(), &x, kT0 + milliseconds(500)).ended, IsEmpty());
  StepPlan p = Step(s.get(), &x, kT0 + milliseconds(501));
  ASSERT_THAT(EndedIds(p), ElementsAre("a"));
  EXPECT_EQ(p.ended[0].reason, EndReason::kNeverAttached);
  EXPECT_THAT(p.decode, IsEmpty());
}

TEST(SchedulerTest, TransferFailureEndsTheRequest) {
  auto s = Make({});
  FakeExecutor x;
  AddRemote(s.get(), "a", 10);
  EXPECT_TRUE(s->FailTransfer("a", "prefill worker gone"));
  StepPlan p = Step(s.get(), &x);
  ASSERT_THAT(EndedIds(p), ElementsAre("a"));
  EXPECT_EQ(p.ended[0].reason, EndReason::kTransferFailed);
  EXPECT_EQ(p.ended[0].detail, "prefill worker gone");
  EXPECT_STREQ(EndReasonName(p.ended[0].reason), "transfer_failed");
}

// Small requests keep arriving every step; an earlier long one is never
// overtaken, and every request starts in arrival order within a bounded wait.
TEST(SchedulerTest, NoStarvationUnderSteadyArrivals) {
  SchedulerOptions o;
  o.max_batch = 4;
  o.max_step_tokens = 50;
  auto s = Make(o);
  FakeExecutor x;
  std::vector<std::string> added;
  std::map<std::string, int> added_at, started_at;
  int step = 0;
  auto add = [&](const std::string& id, int64_t work, int output) {
    AddLocal(s.get(), id, work);
    x.SetOutput(id, output);
    added.push_back(id);
    added_at[id] = step;
  };
  add("long", 400, 3);
  for (; step < 400; ++step) {
    for (int k = 0; k < 3 && step < 50; ++k) {
      add("s" + std::to_string(step) + "_" + std::to_string(k), 5, 2 + (step + k) % 3);
    }
    StepPlan p = s->Schedule(kT0);
    for (const StartWork& w : p.start) started_at[w.id] = step;
    EXPECT_LE(static_cast<int>(p.decode.size() + p.start.size()), 4);
    s->Update(x.Run(p));
  }
  EXPECT_EQ(started_at["long"], 0);
  EXPECT_EQ(x.start_order(), added);  // FIFO
  ASSERT_EQ(x.finish_order().size(), added.size());
  int worst = 0;
  for (const auto& [id, at] : started_at) worst = std::max(worst, at - added_at[id]);
  // 151 requests arrive over 50 steps; 4 slots serve about one a step.
  EXPECT_LE(worst, 70);
  EXPECT_EQ(s->running(), 0);
  EXPECT_EQ(s->waiting(), 0);
}

TEST(SchedulerTest, ScheduleIsDeterministic) {
  auto run = [] {
    SchedulerOptions o;
    o.max_batch = 3;
    o.max_step_tokens = 20;
    o.chunked_start = true;
    o.min_chunk_tokens = 4;
    auto s = Make(o);
    FakeExecutor x;
    std::vector<std::string> trace;
    for (int i = 0; i < 40; ++i) {
      AddLocal(s.get(), "r" + std::to_string(i), (i * 7) % 30);
      x.SetOutput("r" + std::to_string(i), 1 + i % 5);
      StepPlan p = s->Schedule(kT0);
      for (const StartWork& w : p.start) trace.push_back(w.id + ":" + std::to_string(w.tokens));
      for (const std::string& d : p.decode) trace.push_back(d);
      s->Update(x.Run(p));
    }
    return trace;
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace ced
