#include "cc/parity/rounding.h"

#include <algorithm>
#include <string>
#include <unordered_set>

namespace txe::parity {
namespace {

// "stablehlo.add" -> "add"; "chlo.erf" and "mhlo.erf" -> "erf"; "func.call" stays.
std::string_view Bare(std::string_view name) {
  for (std::string_view prefix : {"stablehlo.", "chlo.", "mhlo."}) {
    if (name.substr(0, prefix.size()) == prefix) return name.substr(prefix.size());
  }
  return name;
}

bool In(std::string_view name, const std::unordered_set<std::string_view>& set) { return set.count(name) > 0; }

const std::unordered_set<std::string_view>& MovesDataOps() {
  static const auto* ops = new std::unordered_set<std::string_view>{
      "reshape", "broadcast_in_dim", "broadcast", "transpose", "slice", "dynamic_slice",
      "real_dynamic_slice", "dynamic_update_slice", "concatenate", "gather", "pad", "dynamic_pad",
      "reverse", "select", "get_tuple_element", "tuple", "optimization_barrier", "while", "if",
      "case", "sort", "all_gather", "all_to_all", "collective_permute", "collective_broadcast",
      "send", "recv", "copy", "func.call", "return", "func.return", "dynamic_reshape",
      "dynamic_broadcast_in_dim", "get_dimension_size", "set_dimension_size", "after_all",
      "create_token", "partition_id", "replica_id"};
  return *ops;
}

const std::unordered_set<std::string_view>& ExactOps() {
  static const auto* ops = new std::unordered_set<std::string_view>{
      "maximum", "minimum", "negate", "abs", "clamp", "sign", "floor", "ceil",
      "round_nearest_even", "round_nearest_afz", "compare", "not", "and", "or", "xor",
      "is_finite", "reduce_precision", "real", "imag"};
  return *ops;
}

const std::unordered_set<std::string_view>& OpaqueOps() {
  static const auto* ops = new std::unordered_set<std::string_view>{
      "constant", "custom_call", "bitcast_convert", "rng_bit_generator", "infeed", "outfeed",
      "uniform_quantize", "uniform_dequantize"};
  return *ops;
}

// Elementwise arithmetic XLA:CPU rewrites to f32 (FloatNormalization).
const std::unordered_set<std::string_view>& ElementwiseArithmetic() {
  static const auto* ops = new std::unordered_set<std::string_view>{
      "add", "subtract", "multiply", "divide", "remainder", "power", "atan2", "exponential",
      "exponential_minus_one", "log", "log_plus_one", "sqrt", "rsqrt", "cbrt", "tanh", "logistic",
      "sine", "cosine", "tan", "erf", "erf_inv", "erfc", "lgamma", "digamma", "atanh", "asin",
      "acos", "atan", "sinh", "cosh", "asinh", "acosh"};
  return *ops;
}

bool IsWideningConvert(const graph::Graph& graph, const graph::Op& op) {
  if (op.name != "stablehlo.convert" || op.results.size() != 1) return false;
  const std::string& et = graph.values[op.results[0]].element_type;
  return et == "f32" || et == "f64";
}

// Ops followed back from a consumer to the op that computed its operand.
bool FollowedThrough(std::string_view bare) {
  static const auto* ops = new std::unordered_set<std::string_view>{
      "reshape", "broadcast_in_dim", "broadcast", "transpose", "slice", "dynamic_slice",
      "real_dynamic_slice", "copy", "reverse", "pad", "select", "concatenate"};
  return In(bare, *ops);
}

}  // namespace

bool IsNarrowFloat(std::string_view element_type) { return element_type == "bf16" || element_type == "f16"; }

OpClass Classify(std::string_view op_name) {
  std::string_view bare = Bare(op_name);
  if (In(bare, MovesDataOps()) || In(op_name, MovesDataOps())) return OpClass::kMovesData;
  if (In(bare, ExactOps())) return OpClass::kExact;
  if (In(bare, OpaqueOps())) return OpClass::kOpaque;
  return OpClass::kComputes;
}

bool KeepsExcessPrecision(const graph::Op& op) {
  std::string_view bare = Bare(op.name);
  if (In(bare, ElementwiseArithmetic())) return true;
  if (bare == "dot" || bare == "convolution") return true;
  if (bare == "dot_general") {
    const std::string* batch = op.FindAttribute("batching_dims");
    return batch != nullptr && *batch == "0";
  }
  return false;
}

StatusOr<RoundingAnalysis> FindRoundingPoints(const graph::Graph& graph, const RoundingOptions& options) {
  TXE_RETURN_IF_ERROR(graph::Validate(graph));
  const graph::DefUse du(graph);
  RoundingAnalysis out;
  // Per value: the index of its rounding point in out.points, or -1.
  std::vector<int64_t> point_of(graph.values.size(), -1);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const graph::Op& op = graph.ops[i];
    if (Classify(op.name) != OpClass::kComputes) continue;
    const bool excess = options.excess_precision && KeepsExcessPrecision(op);
    bool any_point = false, any_kept = false;
    for (size_t k = 0; k < op.results.size(); ++k) {
      const int64_t v = op.results[k];
      if (!IsNarrowFloat(graph.values[v].element_type)) continue;
      const std::vector<graph::Use>& uses = du.uses(v);
      if (uses.empty()) continue;  // dead: XLA removes it
      RoundingPoint p;
      p.op = static_cast<int64_t>(i);
      p.result = static_cast<int64_t>(k);
      p.value = v;
      p.element_type = graph.values[v].element_type;
      size_t rounded_uses = 0;
      for (const graph::Use& u : uses) {
        if (excess && u.op >= 0 && IsWideningConvert(graph, graph.ops[u.op])) {
          p.unrounded_uses.push_back(u);
        } else {
          ++rounded_uses;
        }
      }
      if (rounded_uses == 0) {
        any_kept = true;
        continue;
      }
      // Double rounding: an operand computed by another rounding point, seen through data movement.
      for (int64_t operand : op.operands) {
        int64_t src = operand;
        int64_t user = static_cast<int64_t>(i);
        for (size_t hops = 0; hops < graph.ops.size(); ++hops) {
          const int64_t d = du.def_op(src);
          if (d < 0 || !FollowedThrough(Bare(graph.ops[d].name)) || graph.ops[d].operands.empty()) break;
          const graph::Op& mover = graph.ops[d];
          user = d;
          src = mover.operands[Bare(mover.name) == "select" && mover.operands.size() == 3 ? 1 : 0];
        }
        const int64_t q = point_of[src];
        if (q < 0) continue;
        const RoundingPoint& feeding = out.points[q];
        const bool reads_unrounded = std::any_of(
            feeding.unrounded_uses.begin(), feeding.unrounded_uses.end(),
            [&](const graph::Use& u) { return u.op == user; });
        if (!reads_unrounded) {
          p.after = feeding.op;
          break;
        }
      }
      point_of[v] = static_cast<int64_t>(out.points.size());
      out.points.push_back(std::move(p));
      any_point = true;
    }
    if (any_kept && !any_point) out.kept_unrounded.push_back(static_cast<int64_t>(i));
  }
  return out;
}

}  // namespace txe::parity
