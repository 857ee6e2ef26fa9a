// Links only //cc/jax_call (and its //cc/common:status; the module bytes come from a header-only
// test helper): reads a module's entry signature and maps one leaf to it.
#include <cstdio>

#include "cc/jax_call/param_mapping.h"
#include "cc/jax_call/hlo_proto_testing.h"

namespace jc = txe::jax_call;

int main() {
  const std::string proto = txe::jax_call::testing::HloModuleProto(
      "jit_g", {txe::jax_call::testing::Shape(jc::PrimitiveType::F32, {4})},
      txe::jax_call::testing::Shape(jc::PrimitiveType::F32, {4}));
  auto mapping = jc::BuildParamMapping({jc::Leaf{"args[0]", jc::LeafKind::kTensor, "float32", {4}, ""}}, {}, {0}, proto);
  if (!mapping.ok() || mapping->num_hlo_params() != 1 || mapping->rows[0].hlo_param != 0) {
    std::fprintf(stderr, "BuildParamMapping: %s\n", mapping.ok() ? "wrong mapping" : mapping.status().ToString().c_str());
    return 1;
  }
  std::printf("jax_call: %s", mapping->ToTable().c_str());
  return 0;
}
