// Classifies `main`'s arguments and describes every collective, from the program's structure:
//   - a collective token is a scalar operand k of a collective whose result k is unused, or used
//     only as the token operand of later collectives (torch_xla threads one token through every
//     all-reduce of a graph). Its value is never looked at.
//   - for collectives without a token operand (all_gather, reduce_scatter, ...), torch_xla adds
//     the zero token, broadcast, into the data operand: a scalar constant argument whose every
//     use is such an add feeding collectives only is a token too.
//   - a collective's scale is the constant its (only) data result is multiplied by, or 1/d
//     for a constant d it is divided by (JAX's pmean), when that multiply or divide is the
//     result's only use; 1.0 otherwise.
#ifndef TXE_CC_COLLECTIVES_ANALYSIS_H_
#define TXE_CC_COLLECTIVES_ANALYSIS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cc/common/status.h"
#include "cc/graph/graph.h"

namespace txe::collectives {

// torch.export's input kinds, plus the collective token torch_xla adds.
enum class InputKind : int {
  kUserInput = 0,
  kParameter = 1,
  kBuffer = 2,
  kConstant = 3,
  kCollectiveToken = 4,
};

const char* InputKindName(InputKind kind);
StatusOr<InputKind> InputKindFromName(const std::string& name);

// What the exporter says an argument is (a token is declared as a constant by torch_xla).
struct DeclaredInput {
  InputKind kind = InputKind::kUserInput;
  std::optional<double> scalar_value;  // for scalar constants: lets a scale come from an argument
};

struct Collective {
  int64_t op_index = -1;  // into graph::Graph::ops
  std::string op;         // "all_reduce", "all_gather", "reduce_scatter", ...
  std::string reduce;     // "sum", "max", "min", "mul", "and", "or", "xor"; empty if none
  std::vector<std::vector<int64_t>> replica_groups;
  std::vector<int64_t> token_operands;   // operand positions holding a token
  std::optional<int64_t> token_input;    // the main argument the token comes from
  bool token_mixed_into_operand = false; // token added into the data operand (no token operand)
  std::vector<int64_t> operand_inputs;   // main arguments the data operands depend on, sorted
  double scale = 1.0;
  std::optional<int64_t> scale_op_index;  // the multiply (or divide) that applies the scale
};

struct Analysis {
  std::vector<InputKind> input_kinds;  // one per main argument
  std::vector<bool> input_used;        // whether main uses the argument at all
  std::vector<Collective> collectives; // program order
  std::vector<int64_t> token_inputs;   // main arguments that are tokens, ascending
};

// Short name of a collective op ("stablehlo.all_reduce" -> "all_reduce"), or "" if `op_name`
// is not a collective.
std::string CollectiveName(const std::string& op_name);
// (reduction body op, reduce name) of every reduction the analysis names: "stablehlo.add" ->
// "sum", "stablehlo.maximum" -> "max", ..., "stablehlo.xor" -> "xor". The one list of names.
const std::vector<std::pair<std::string, std::string>>& ReduceNames();
// The reduce name of a reduction body op (ReduceNames); the op name itself if unknown.
std::string ReduceName(const std::string& reduction_op);

// `declared` has one entry per main argument. The graph is checked first (graph::Validate):
// InvalidArgument naming the op when it is malformed.
StatusOr<Analysis> Analyze(const graph::Graph& graph, const std::vector<DeclaredInput>& declared);

}  // namespace txe::collectives

#endif  // TXE_CC_COLLECTIVES_ANALYSIS_H_
