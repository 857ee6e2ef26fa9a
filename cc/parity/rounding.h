// Where a StableHLO program rounds, as XLA:CPU executes it: the rounding-point analysis behind
// parity's rounded replay (torch_xla_ext/parity/program/rewrite.py) and its explanations.
//
// XLA:CPU computes bf16/f16 arithmetic in f32 and rounds each op's result back to its element
// type, so every op that computes a narrow float value is a rounding point. The rules, measured on
// torch_xla 2.9's XLA:CPU (bit-identical replays of the zoo models in tests/parity):
//   - ops that only move or select data (reshape, broadcast, transpose, slice, gather, pad,
//     concatenate, select, while, ...) and exact ops (max, min, negate, abs, compare, ...) do not
//     round; constants and opaque ops (custom_call, bitcast_convert) keep their stored values;
//   - a reduction body's ops round at every step (the accumulator is the body's element type);
//   - excess precision (xla_allow_excess_precision, on by default): a convert to f32/f64 of the
//     result of an elementwise op, of a dot without batch dimensions or of a convolution reads
//     the f32 value before rounding. The rule is per use: the op's other users read the rounded
//     value; when every use is such a convert the program never rounds there.
// A point with `after` set rounds right after another narrow rounding point (through data
// movement): a double rounding that an eager kernel fusing both steps does not do (pytorch/xla
// #8747: a bf16 dot rounded, then the bias add rounded again).
//
// A torch_xla fork can run this on the StableHLO its lowering produced, e.g. to flag double
// rounding. No MLIR dependency: the caller builds the graph (cc/graph/graph.h).
#ifndef TXE_CC_PARITY_ROUNDING_H_
#define TXE_CC_PARITY_ROUNDING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cc/common/status.h"
#include "cc/graph/graph.h"

namespace txe::parity {

// "bf16" and "f16": the element types XLA:CPU computes in f32 and rounds back to.
bool IsNarrowFloat(std::string_view element_type);

// What an op does to the values it produces.
enum class OpClass {
  kMovesData,  // reshapes, selects or moves existing values: no rounding
  kExact,      // computes values representable in its operands' type (max, negate, compare, ...)
  kOpaque,     // its values come from outside the arithmetic (constant, custom_call, bitcast)
  kComputes,   // computes new values, rounded to its element type (anything not listed above)
};
OpClass Classify(std::string_view op_name);

// Whether a convert to f32/f64 of this op's narrow result reads it unrounded (see above).
bool KeepsExcessPrecision(const graph::Op& op);

struct RoundingOptions {
  // XLA's xla_allow_excess_precision (on by default).
  bool excess_precision = true;
};

struct RoundingPoint {
  int64_t op = -1;      // index into Graph::ops
  int64_t result = 0;   // which result of the op
  int64_t value = -1;   // its value id
  std::string element_type;
  // Uses that read the value before rounding (excess precision); every other use reads it rounded.
  std::vector<graph::Use> unrounded_uses;
  // The rounding point op whose rounded value reaches this op's operands through data movement,
  // or -1: with it, the program rounds twice in a row.
  int64_t after = -1;
};

struct RoundingAnalysis {
  std::vector<RoundingPoint> points;  // in op order, then result order
  // Ops computing a narrow value that every use reads unrounded: the program never rounds there.
  std::vector<int64_t> kept_unrounded;
};

// InvalidArgument for a malformed graph (see graph::Validate).
StatusOr<RoundingAnalysis> FindRoundingPoints(const graph::Graph& graph, const RoundingOptions& options = {});

}  // namespace txe::parity

#endif  // TXE_CC_PARITY_ROUNDING_H_
