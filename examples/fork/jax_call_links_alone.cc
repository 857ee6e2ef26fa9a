// Links only //cc/jax_call (and its //cc/common:status; the module bytes come from a header-only
// test helper): reads a module's entry signature and maps one leaf to it.
#include <cstdio>

#include "cc/jax_call/param_mapping.h"
#include "examples/fork/hlo_module_builder.h"

namespace jc = txe::jax_call;

int main() {
  const std::string proto = xla_fork::testing::HloModuleProto(
      "jit_g", {xla_fork::testing::ShapeProto(jc::PrimitiveType::kF32, {4})},
      xla_fork::testing::ShapeProto(jc::PrimitiveType::kF32, {4}));
  auto mapping = jc::BuildParamMapping({jc::Leaf{"args[0]", jc::LeafKind::kTensor, "float32", {4}, ""}}, {}, {0}, proto);
  if (!mapping.ok() || mapping->num_hlo_params() != 1 || mapping->rows[0].hlo_param != 0) {
    std::fprintf(stderr, "BuildParamMapping: %s\n", mapping.ok() ? "wrong mapping" : mapping.status().ToString().c_str());
    return 1;
  }
  std::printf("jax_call: %s", mapping->ToTable().c_str());
  return 0;
}
