#include "cc/collectives/hooks.h"

#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace txe::collectives {
namespace {

struct Registry {
  std::mutex mu;
  std::deque<AllReduceCall> log;
  int64_t next_sequence = 0;
  std::map<int64_t, AllReduceObserver> observers;
  int64_t next_observer = 0;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: usable during static teardown
  return *registry;
}

}  // namespace

StatusOr<int64_t> RecordAllReduce(AllReduceCall call) {
  if (call.reduce.empty()) return InvalidArgumentError("AllReduceCall.reduce is empty");
  if (!std::isfinite(call.requested_scale) || !std::isfinite(call.applied_scale)) {
    return InvalidArgumentError("AllReduceCall scale is not finite");
  }
  if (call.world_size < 1) {
    return InvalidArgumentError("AllReduceCall.world_size " + std::to_string(call.world_size) + " < 1");
  }
  Registry& r = GetRegistry();
  std::vector<AllReduceObserver> observers;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    call.sequence = r.next_sequence++;
    r.log.push_back(call);
    if (r.log.size() > kMaxRecordedCalls) r.log.pop_front();
    for (const auto& [id, obs] : r.observers) observers.push_back(obs);
  }
  for (const auto& obs : observers) obs(call);
  return call.sequence;
}

int64_t NextAllReduceSequence() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.next_sequence;
}

std::vector<AllReduceCall> RecordedAllReducesSince(int64_t sequence) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<AllReduceCall> out;
  for (const AllReduceCall& c : r.log) {
    if (c.sequence >= sequence) out.push_back(c);
  }
  return out;
}

void ClearRecordedAllReduces() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.log.clear();
}

int64_t AddAllReduceObserver(AllReduceObserver observer) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t id = r.next_observer++;
  r.observers.emplace(id, std::move(observer));
  return id;
}

Status RemoveAllReduceObserver(int64_t id) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.observers.erase(id) == 0) {
    return NotFoundError("no all-reduce observer with id " + std::to_string(id));
  }
  return OkStatus();
}

}  // namespace txe::collectives
