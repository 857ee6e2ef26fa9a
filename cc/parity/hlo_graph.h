// The op/dtype graph of an HLO module, parsed from HLO text (what torch_xla's
// _get_xla_tensors_hlo and XLA's HloModule::ToString print), and the places where the program
// rounds: ops that compute a value and store it in a narrow float type (bf16, f16).
//
// A torch_xla fork can call FindRoundingPoints on the HLO its lowering produced to flag double
// rounding (e.g. a bf16 dot whose result feeds a bf16 add: XLA rounds twice, a fused eager
// kernel once). The parser keeps what parity checks need (shapes, opcodes, operands, raw
// attributes); it is not a validator of HLO.
#ifndef TXE_CC_PARITY_HLO_GRAPH_H_
#define TXE_CC_PARITY_HLO_GRAPH_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cc/common/status.h"

namespace txe::parity {

struct HloShape {
  std::string element_type;  // "bf16", "f32", "s64", "pred", ...; empty for a tuple.
  std::vector<int64_t> dims;
  std::vector<HloShape> tuple_shapes;

  bool is_tuple() const { return element_type.empty(); }
  std::string ToString() const;  // "bf16[3,4]" or "(s64[], f32[2])", without layouts.
};

struct HloInstruction {
  std::string name;  // without the leading '%'
  HloShape shape;
  std::string opcode;
  std::vector<std::string> operands;  // instruction names
  // The text inside the parentheses of constant(...), parameter(...) and iota(); empty otherwise.
  std::string literal;
  // key=value pairs after the operands, values verbatim ("{1,0}", "%FnComputation.26", "LT").
  std::vector<std::pair<std::string, std::string>> attributes;
  bool is_root = false;

  const std::string* FindAttribute(std::string_view key) const;
};

struct HloComputation {
  std::string name;
  bool is_entry = false;
  std::vector<HloInstruction> instructions;  // in program order
  std::string root;

  // nullptr when absent.
  const HloInstruction* Find(std::string_view instruction_name) const;
  // Rebuilds the name index; call after changing `instructions`.
  void Reindex();

 private:
  std::unordered_map<std::string, size_t> index_;
};

struct HloModule {
  std::string name;
  std::vector<HloComputation> computations;  // in text order
  size_t entry = 0;

  const HloComputation& entry_computation() const { return computations[entry]; }
  const HloComputation* FindComputation(std::string_view computation_name) const;
};

// InvalidArgument naming the line for text it cannot read; NotFound-free: unknown opcodes parse.
StatusOr<HloModule> ParseHloText(std::string_view text);

// Opcodes that compute new values (and so round to their element type); the others move data.
bool IsArithmeticOpcode(std::string_view opcode);
// Opcodes that only reshape or select data, followed through when looking for a producer.
bool IsLayoutOpcode(std::string_view opcode);
bool IsNarrowFloat(std::string_view element_type);

// An op whose result is stored in a narrow float type, i.e. a place where the program rounds.
// `after` names the narrow-float arithmetic op feeding it through layout ops, when there is one:
// that pair rounds twice in a row.
struct RoundingPoint {
  std::string computation;
  std::string instruction;
  std::string opcode;
  std::string element_type;
  std::string after;  // empty when the operands come from no narrow-float arithmetic op
  std::string after_opcode;
};

struct RoundingPointOptions {
  // XLA's xla_allow_excess_precision (on by default): a narrow-float elementwise op whose every
  // user converts it to f32/f64 is computed in the wider type and does not round.
  bool excess_precision = true;
};

// In computation order, then program order.
std::vector<RoundingPoint> FindRoundingPoints(const HloModule& module,
                                              const RoundingPointOptions& options = {});

// Elementwise opcodes (a subset of the arithmetic ones, plus select).
bool IsElementwiseOpcode(std::string_view opcode);

}  // namespace txe::parity

#endif  // TXE_CC_PARITY_HLO_GRAPH_H_
