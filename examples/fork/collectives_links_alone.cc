// Links only //cc/collectives (and its //cc/common:status): records one all-reduce the way a
// fork's lowering does and reads it back.
#include <cstdio>

#include "cc/collectives/hooks.h"

int main() {
  txe::collectives::AllReduceCall call;
  call.reduce = "sum";
  call.requested_scale = 0.125;
  call.applied_scale = 0.125;
  call.world_size = 8;
  call.lowering = "all_reduce+multiply";
  txe::StatusOr<int64_t> seq = txe::collectives::RecordAllReduce(call);
  if (!seq.ok()) {
    std::fprintf(stderr, "RecordAllReduce: %s\n", seq.status().ToString().c_str());
    return 1;
  }
  auto calls = txe::collectives::RecordedAllReducesSince(*seq);
  if (calls.size() != 1 || calls[0].requested_scale != 0.125 || calls[0].lowering != "all_reduce+multiply") {
    std::fprintf(stderr, "recorded %zu calls, not the one just made\n", calls.size());
    return 1;
  }
  std::printf("collectives: recorded all-reduce #%lld\n", static_cast<long long>(*seq));
  return 0;
}
