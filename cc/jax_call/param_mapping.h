// Maps the flattened leaves of a call_jax pytree to the parameters of the HLO module JAX lowered,
// and checks that mapping against the module itself.
//
// JAX's calling convention (jax.jit(..., keep_unused=False)): the lowered entry computation takes
//   [hoisted constants..., kept tensor leaves...]
// where `kept_var_idx` indexes the concatenation of the hoisted constants (JAX's simplified jaxpr
// constants; always kept, always first) and the tensor leaves in flattening order. Static leaves
// (Python scalars, strings) are baked into the module and never become parameters.
//
// A torch_xla fork can call BuildParamMapping from its own user-computation lowering to verify a
// JAX-produced HloModuleProto before it wires tensors to parameters; every error names the pytree
// path of the offending leaf.
#ifndef TXE_CC_JAX_CALL_PARAM_MAPPING_H_
#define TXE_CC_JAX_CALL_PARAM_MAPPING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cc/common/status.h"
#include "cc/jax_call/hlo_signature.h"

namespace txe::jax_call {

enum class LeafKind { kTensor, kStatic };

const char* LeafKindName(LeafKind kind);  // "tensor" / "static"

// One flattened input leaf, as the caller sees it.
struct Leaf {
  std::string path;              // jax keystr form with the root named: "args[0]['w']"
  LeafKind kind = LeafKind::kTensor;
  std::string dtype;             // tensors: numpy/JAX dtype name ("float32", "bfloat16")
  std::vector<int64_t> shape;    // tensors only
  std::string value;             // statics only: a printable form of the value
};

// A constant JAX hoisted out of the function body into a leading parameter.
struct ConstantSpec {
  std::string dtype;
  std::vector<int64_t> shape;
};

struct ParamRow {
  std::string path;
  LeafKind kind = LeafKind::kTensor;
  bool kept = false;
  int64_t hlo_param = -1;  // -1: not a parameter of the module
  std::vector<int64_t> shape;
  std::string dtype;
  std::string value;
};

struct ConstantRow {
  int64_t index = 0;       // position among the hoisted constants
  int64_t hlo_param = -1;
  std::vector<int64_t> shape;
  std::string dtype;
};

// Where the value of one HLO parameter comes from.
struct ParamSource {
  enum class Kind { kLeaf, kConstant };
  Kind kind = Kind::kLeaf;
  int64_t index = 0;  // kLeaf: index into the leaves; kConstant: index into the constants
};

struct ParamMapping {
  std::string module_name;
  std::vector<ParamRow> rows;            // one per leaf, in flattening order
  std::vector<ConstantRow> constants;    // one per hoisted constant
  std::vector<ParamSource> sources;      // one per HLO parameter, in parameter order
  std::vector<ArrayType> results;        // the module's outputs, flattened one tuple level

  int64_t num_hlo_params() const { return static_cast<int64_t>(sources.size()); }
  // A fixed-width table: path, kind, kept, hlo_param, shape, dtype; then the constants.
  std::string ToTable() const;
};

// Builds the mapping from JAX's kept_var_idx and checks it against `signature`: the parameter
// count, and each parameter's element type and dimensions against the leaf (or constant) that
// feeds it. InvalidArgument names the leaf path on any mismatch; Unimplemented for tuple-shaped
// or dynamic parameters.
StatusOr<ParamMapping> BuildParamMapping(const std::vector<Leaf>& leaves,
                                         const std::vector<ConstantSpec>& constants,
                                         const std::vector<int64_t>& kept_var_idx,
                                         const HloSignature& signature);

// Checks the module's outputs (its result flattened one tuple level) against the output leaves
// the traced function returned (path "output['y']", dtype, shape): their count, element types
// and dimensions. InvalidArgument names the output path on a mismatch.
Status CheckOutputs(const ParamMapping& mapping, const std::vector<Leaf>& outputs);

// The same, reading the signature from a serialized HloModuleProto.
StatusOr<ParamMapping> BuildParamMapping(const std::vector<Leaf>& leaves,
                                         const std::vector<ConstantSpec>& constants,
                                         const std::vector<int64_t>& kept_var_idx,
                                         std::string_view serialized_hlo_module_proto);

}  // namespace txe::jax_call

#endif  // TXE_CC_JAX_CALL_PARAM_MAPPING_H_
