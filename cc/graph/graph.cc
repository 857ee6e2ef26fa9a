#include "cc/graph/graph.h"

#include <string>

namespace txe::graph {

const std::string* Op::FindAttribute(std::string_view key) const {
  for (const auto& [k, v] : attributes) {
    if (k == key) return &v;
  }
  return nullptr;
}

Status Validate(const Graph& graph) {
  const int64_t n = static_cast<int64_t>(graph.values.size());
  if (graph.num_args < 0 || graph.num_args > n) {
    return InvalidArgumentError("graph: num_args " + std::to_string(graph.num_args) +
                                " is outside [0, " + std::to_string(n) + "]");
  }
  std::vector<bool> defined(n, false);
  for (int64_t i = 0; i < graph.num_args; ++i) defined[i] = true;
  auto define = [&](int64_t v, const std::string& where) -> Status {
    if (v < 0 || v >= n) return InvalidArgumentError(where + ": result id " + std::to_string(v) + " out of range");
    if (defined[v]) return InvalidArgumentError(where + ": value %" + std::to_string(v) + " defined twice");
    defined[v] = true;
    return OkStatus();
  };
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const std::string where = "graph: op " + std::to_string(i) + " (" + op.name + ")";
    if (op.parent < -1 || op.parent >= static_cast<int64_t>(i)) {
      return InvalidArgumentError(where + ": parent " + std::to_string(op.parent) + " is not an earlier op");
    }
    for (int64_t v : op.operands) {
      if (v < 0 || v >= n) return InvalidArgumentError(where + ": operand id " + std::to_string(v) + " out of range");
      if (!defined[v]) return InvalidArgumentError(where + ": operand %" + std::to_string(v) + " used before its definition");
    }
    for (int64_t v : op.region_args) TXE_RETURN_IF_ERROR(define(v, where));
    for (int64_t v : op.results) TXE_RETURN_IF_ERROR(define(v, where));
  }
  for (int64_t v : graph.returned) {
    if (v < 0 || v >= n || !defined[v]) {
      return InvalidArgumentError("graph: return operand " + std::to_string(v) + " is not a defined value");
    }
  }
  return OkStatus();
}

DefUse::DefUse(const Graph& graph)
    : uses_(graph.values.size()), def_op_(graph.values.size(), -1), def_result_(graph.values.size(), -1) {
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const int64_t index = static_cast<int64_t>(i);
    for (size_t k = 0; k < op.operands.size(); ++k) uses_[op.operands[k]].push_back({index, static_cast<int64_t>(k)});
    for (size_t k = 0; k < op.results.size(); ++k) {
      def_op_[op.results[k]] = index;
      def_result_[op.results[k]] = static_cast<int64_t>(k);
    }
  }
  for (size_t k = 0; k < graph.returned.size(); ++k) uses_[graph.returned[k]].push_back({-1, static_cast<int64_t>(k)});
}

}  // namespace txe::graph
