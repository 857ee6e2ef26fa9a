// The hook a collective lowering calls for every all-reduce it emits, so tools can see what was
// requested (reduce type, scale, groups) next to what was lowered. torch_xla_ext's
// collectives.all_reduce calls it; a torch_xla fork calls it from its all-reduce lowering:
//
//   txe::collectives::AllReduceCall call;
//   call.reduce = "sum"; call.requested_scale = scale; call.applied_scale = scale;
//   call.replica_groups = groups; call.world_size = world_size;
//   call.lowering = "all_reduce+multiply";
//   txe::collectives::RecordAllReduce(std::move(call));
//
// Thread-safe. The log keeps the newest kMaxRecordedCalls calls; observers see every call.
#ifndef TXE_CC_COLLECTIVES_HOOKS_H_
#define TXE_CC_COLLECTIVES_HOOKS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cc/common/status.h"

namespace txe::collectives {

struct AllReduceCall {
  std::string reduce;              // "sum", "max", "min", "mul", "and", "or"
  double requested_scale = 1.0;    // what the caller asked for
  double applied_scale = 1.0;      // what the lowering multiplied in (1.0 if it dropped it)
  std::vector<std::vector<int64_t>> replica_groups;  // empty: all replicas
  int64_t world_size = 1;
  std::string lowering;            // what was emitted, e.g. "all_reduce", "all_reduce+multiply", "clone"
  int64_t sequence = -1;           // assigned by RecordAllReduce, increasing from 0
};

inline constexpr size_t kMaxRecordedCalls = 1 << 16;

// Validates and records a call; returns its sequence number. InvalidArgument for an empty
// reduce type, a non-finite scale or a world size < 1.
StatusOr<int64_t> RecordAllReduce(AllReduceCall call);

// The sequence number the next recorded call will get: take it before a trace, then read
// RecordedAllReducesSince(it) after.
int64_t NextAllReduceSequence();
std::vector<AllReduceCall> RecordedAllReducesSince(int64_t sequence);
void ClearRecordedAllReduces();

using AllReduceObserver = std::function<void(const AllReduceCall&)>;
// Observers run on the recording thread, outside the log's lock.
int64_t AddAllReduceObserver(AllReduceObserver observer);
Status RemoveAllReduceObserver(int64_t id);

}  // namespace txe::collectives

#endif  // TXE_CC_COLLECTIVES_HOOKS_H_
