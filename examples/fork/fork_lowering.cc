#include "examples/fork/fork_lowering.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "cc/collectives/analysis.h"
#include "cc/collectives/hooks.h"
#include "cc/graph_breaks/hooks.h"
#include "cc/jax_call/param_mapping.h"

namespace xla_fork {
namespace {

std::string ElementType(int type) {
  switch (type) {
    case xla::PRED: return "i1";
    case xla::S32: return "i32";
    case xla::S64: return "i64";
    case xla::BF16: return "bf16";
    case xla::F16: return "f16";
    case xla::F32: return "f32";
    case xla::F64: return "f64";
    default: return "";
  }
}

txe::graph::TensorType TypeOf(const xla::ShapeProto& shape) {
  return {std::vector<int64_t>(shape.dimensions().begin(), shape.dimensions().end()),
          ElementType(shape.element_type())};
}

// HLO opcodes the stand-in converts one to one, and their StableHLO ops.
const std::map<std::string, std::string>& StableHloOps() {
  static const auto* ops = new std::map<std::string, std::string>{
      {"add", "stablehlo.add"},         {"multiply", "stablehlo.multiply"},
      {"maximum", "stablehlo.maximum"}, {"minimum", "stablehlo.minimum"},
      {"convert", "stablehlo.convert"}, {"broadcast", "stablehlo.broadcast_in_dim"},
      {"constant", "stablehlo.constant"}, {"all-reduce", "stablehlo.all_reduce"},
  };
  return *ops;
}

// FNV-1a over the serialized module: the stand-in for the fork's computation hash.
std::string Fingerprint(const xla::HloModuleProto& proto) {
  uint64_t h = 1469598103934665603ull;
  for (char c : proto.SerializeAsString()) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

xla::ShapeProto Shape(xla::PrimitiveType type, const std::vector<int64_t>& dims) {
  xla::ShapeProto s;
  s.set_element_type(type);
  for (int64_t d : dims) s.add_dimensions(d);
  return s;
}

xla::HloInstructionProto* Instruction(xla::HloComputationProto* c, int64_t id, const std::string& opcode,
                                      const xla::ShapeProto& shape, std::vector<int64_t> operands = {}) {
  xla::HloInstructionProto* i = c->add_instructions();
  i->set_id(id);
  i->set_name(opcode + "." + std::to_string(id));
  i->set_opcode(opcode);
  *i->mutable_shape() = shape;
  for (int64_t o : operands) i->add_operand_ids(o);
  return i;
}

// The identity graph ReplicateShardedData builds: p0 + convert(0), its result replicated.
xla::HloModuleProto IdentityModule(const std::vector<int64_t>& shape) {
  xla::HloModuleProto m;
  m.set_name("ReplicateShardedData");
  m.set_entry_computation_id(1);
  xla::HloComputationProto* c = m.add_computations();
  c->set_id(1);
  c->set_name("ReplicateShardedData");
  Instruction(c, 2, "parameter", Shape(xla::F32, shape))->set_parameter_number(0);
  Instruction(c, 3, "constant", Shape(xla::S32, {}))->mutable_literal()->add_s32s(0);
  Instruction(c, 4, "convert", Shape(xla::F32, {}), {3});
  Instruction(c, 5, "broadcast", Shape(xla::F32, shape), {4});
  Instruction(c, 6, "add", Shape(xla::F32, shape), {2, 5});
  c->set_root_id(6);
  return m;
}

}  // namespace

txe::Status ConvertHloToStableHlo(const xla::HloModuleProto* proto, ModuleOp* mlir_module) {
  std::map<int64_t, const xla::HloComputationProto*> computations;
  for (const xla::HloComputationProto& c : proto->computations()) computations[c.id()] = &c;
  auto entry_it = computations.find(proto->entry_computation_id());
  if (entry_it == computations.end()) {
    return txe::InvalidArgumentError("HloModuleProto " + proto->name() + ": no entry computation " +
                                     std::to_string(proto->entry_computation_id()));
  }
  const xla::HloComputationProto& entry = *entry_it->second;
  txe::graph::Graph g;
  std::map<int64_t, std::vector<int64_t>> values_of;  // instruction id -> its result values
  std::map<int64_t, const xla::HloInstructionProto*> parameters;
  for (const xla::HloInstructionProto& i : entry.instructions()) {
    if (i.opcode() == "parameter") parameters[i.parameter_number()] = &i;
  }
  for (const auto& [number, i] : parameters) {
    values_of[i->id()] = {static_cast<int64_t>(g.values.size())};
    g.values.push_back(TypeOf(i->shape()));
  }
  g.num_args = static_cast<int64_t>(g.values.size());
  for (const xla::HloInstructionProto& i : entry.instructions()) {
    const std::string where = "HloModuleProto " + proto->name() + ": instruction " + i.name();
    if (i.opcode() == "parameter") continue;
    if (i.opcode() == "get-tuple-element") {
      auto tuple = i.operand_ids_size() == 1 ? values_of.find(i.operand_ids(0)) : values_of.end();
      if (tuple == values_of.end() || i.tuple_index() < 0 ||
          i.tuple_index() >= static_cast<int64_t>(tuple->second.size())) {
        return txe::InvalidArgumentError(where + ": not an element of a tuple defined before it");
      }
      values_of[i.id()] = {tuple->second[i.tuple_index()]};
      continue;
    }
    std::vector<int64_t> operands;
    for (int64_t id : i.operand_ids()) {
      auto it = values_of.find(id);
      if (it == values_of.end() || it->second.size() != 1) {
        return txe::InvalidArgumentError(where + ": operand " + std::to_string(id) + " is not a value defined before it");
      }
      operands.push_back(it->second[0]);
    }
    if (i.opcode() == "tuple") {
      values_of[i.id()] = operands;
      continue;
    }
    auto op_name = StableHloOps().find(i.opcode());
    if (op_name == StableHloOps().end()) {
      return txe::InvalidArgumentError(where + ": opcode " + i.opcode() + " is not one the stand-in converts");
    }
    txe::graph::Op op;
    op.name = op_name->second;
    op.operands = std::move(operands);
    if (i.opcode() == "constant") {  // a splat: one element, or every element equal
      const auto& f = i.literal().f32s();
      const auto& s = i.literal().s32s();
      if (f.size() > 0 && std::all_of(f.begin(), f.end(), [&](float v) { return v == f[0]; })) op.splat_value = f[0];
      if (s.size() > 0 && std::all_of(s.begin(), s.end(), [&](int32_t v) { return v == s[0]; })) op.splat_value = s[0];
    }
    if (i.opcode() == "all-reduce") {
      if (i.called_computation_ids_size() != 1 || !computations.count(i.called_computation_ids(0))) {
        return txe::InvalidArgumentError(where + ": all-reduce without its reduction computation");
      }
      const xla::HloComputationProto& body = *computations[i.called_computation_ids(0)];
      for (const xla::HloInstructionProto& b : body.instructions()) {
        auto reduction = StableHloOps().find(b.opcode());
        if (b.id() == body.root_id() && reduction != StableHloOps().end()) op.reduction = reduction->second;
      }
      if (i.collective_device_list().has_iota_replica_group_list()) {
        return txe::InvalidArgumentError(where + ": iota replica groups are not read by the stand-in");
      }
      for (const xla::ReplicaGroup& group : i.collective_device_list().replica_groups()) {
        op.replica_groups.emplace_back(group.replica_ids().begin(), group.replica_ids().end());
      }
    }
    const bool tuple_result = i.shape().element_type() == xla::TUPLE;
    std::vector<xla::ShapeProto> shapes = tuple_result
        ? std::vector<xla::ShapeProto>(i.shape().tuple_shapes().begin(), i.shape().tuple_shapes().end())
        : std::vector<xla::ShapeProto>{i.shape()};
    for (const xla::ShapeProto& s : shapes) {
      op.results.push_back(static_cast<int64_t>(g.values.size()));
      g.values.push_back(TypeOf(s));
    }
    values_of[i.id()] = op.results;
    g.ops.push_back(std::move(op));
  }
  auto root = values_of.find(entry.root_id());
  if (root == values_of.end()) {
    return txe::InvalidArgumentError("HloModuleProto " + proto->name() + ": no root instruction " +
                                     std::to_string(entry.root_id()));
  }
  g.returned = root->second;
  TXE_RETURN_IF_ERROR(txe::graph::Validate(g));
  mlir_module->main = std::move(g);
  return txe::OkStatus();
}

// [FORK.md all-reduce]
txe::Status TypeAllReduces(const ModuleOp& module, int64_t world_size) {
  // Every argument is device data here; the token and the scale are found by structure.
  std::vector<txe::collectives::DeclaredInput> declared(module.main.num_args);
  TXE_ASSIGN_OR_RETURN(txe::collectives::Analysis analysis, txe::collectives::Analyze(module.main, declared));
  for (const txe::collectives::Collective& c : analysis.collectives) {
    if (c.op != "all_reduce") continue;
    txe::collectives::AllReduceCall call;
    call.reduce = c.reduce;
    call.requested_scale = c.scale;  // what the program asks for is what this module applies:
    call.applied_scale = c.scale;    // the Python wrapper records the request at trace time
    call.replica_groups = c.replica_groups;
    call.world_size = world_size;
    call.lowering = c.scale_op_index ? "all_reduce+multiply" : "all_reduce";
    TXE_RETURN_IF_ERROR(txe::collectives::RecordAllReduce(std::move(call)).status());
  }
  return txe::OkStatus();
}
// [end]

// [FORK.md compile]
txe::StatusOr<std::vector<ComputationPtr>> PjRtComputationClient::Compile(std::vector<CompileInstance> instances) {
  std::vector<ComputationPtr> computations;
  for (CompileInstance& instance : instances) {
    auto computation = std::make_shared<Computation>();
    computation->name = instance.computation.name();
    computation->hash = Fingerprint(instance.computation);
    // Every compile of the runtime, whoever asked for it: the graph executor's cache misses, the
    // dynamo bridge's warm-up, ReplicateShardedData's identity graph.
    TXE_GB_SCOPED(kCompile, kXla, computation->name + "/" + computation->hash);
    // XLA_STABLEHLO_COMPILE: HLO -> StableHLO, then the fork's own passes (ConvertStableHloToSdy).
    TXE_RETURN_IF_ERROR(ConvertHloToStableHlo(&instance.computation, &computation->module));
    TXE_RETURN_IF_ERROR(TypeAllReduces(computation->module, device_count_));
    // ... executable = client_->CompileAndLoad(mlir_module, compile_options) ...
    computations.push_back(std::move(computation));
  }
  return computations;
}
// [end]

// [FORK.md execute]
std::vector<DataPtr> PjRtComputationClient::ExecuteComputation(const Computation& computation,
                                                               const std::vector<DataPtr>& arguments,
                                                               const std::string& device,
                                                               const ExecuteComputationOptions& options) {
  TXE_GB_SCOPED(kExecute, kXla, computation.name + "/" + computation.hash);
  // ... pjrt_computation.executable->ExecuteSharded(buffers, pjrt_device, execute_options, ...) ...
  std::vector<DataPtr> results;
  results.push_back(std::make_shared<Data>(Data{device, arguments.empty() ? std::vector<int64_t>{} : arguments[0]->shape}));
  return results;
}
// [end]

// [FORK.md replicate-sharded-data]
txe::StatusOr<DataPtr> PjRtComputationClient::ReplicateShardedData(const DataPtr& handle) {
  if (!handle->sharded) return handle;
  // An identity graph whose output is replicated, built and compiled again on every call.
  std::vector<CompileInstance> instances;
  instances.push_back({IdentityModule(handle->shape), GetDefaultDevice(), /*is_sharded=*/true});
  TXE_ASSIGN_OR_RETURN(std::vector<ComputationPtr> computations, Compile(std::move(instances)));
  return ExecuteComputation(*computations.front(), {handle}, GetDefaultDevice(), {}).front();
}
// [end]

txe::StatusOr<std::vector<DataPtr>> PjRtComputationClient::TransferFromDevice(const std::vector<DataPtr>& handles) {
  std::vector<DataPtr> literals;
  for (const DataPtr& handle : handles) {
    TXE_ASSIGN_OR_RETURN(DataPtr replicated, ReplicateShardedData(handle));
    TXE_GB_SCOPED(kTransferToHost, kXla, "TransferFromDevice");
    // ... replicated->buffer->ToLiteral() ...
    literals.push_back(std::make_shared<Data>(Data{"CPU:0", replicated->shape}));
  }
  return literals;
}

// [FORK.md cpu-fallback]
void xla_fallback(const OperatorHandle& op, Stack* stack) {
  const std::string& name = op.operator_name;  // c10::toString(op.operator_name())
  TXE_GB_FALLBACK_OP(name);
  // ... _fallback_counters[name]->AddValue(1); at::native::cpu_fallback(op, stack, true) ...
}
// [end]

// [FORK.md call_jax]
txe::StatusOr<std::vector<CallJaxOperand>> LowerCallJax(const CallJaxRequest& request) {
  TXE_ASSIGN_OR_RETURN(txe::jax_call::ParamMapping mapping,
                       txe::jax_call::BuildParamMapping(request.leaves, request.constants,
                                                        request.kept_var_idx, request.hlo_module_proto));
  TXE_RETURN_IF_ERROR(txe::jax_call::CheckOutputs(mapping, request.outputs));
  // One operand per HLO parameter, in parameter order: hoisted constants first, then the kept
  // tensor leaves; unused leaves and statics are not operands at all.
  std::vector<CallJaxOperand> operands;
  for (const txe::jax_call::ParamSource& s : mapping.sources) {
    if (s.kind == txe::jax_call::ParamSource::Kind::kConstant) {
      operands.push_back({true, s.index, "const[" + std::to_string(s.index) + "]"});
    } else {
      operands.push_back({false, s.index, request.leaves[s.index].path});
    }
  }
  return operands;
}
// [end]

xla::HloModuleProto AllReduceModule(const std::string& name, int64_t n, const std::string& reduction, double scale,
                                    const std::vector<std::vector<int64_t>>& groups) {
  xla::HloModuleProto m;
  m.set_name(name);
  m.set_entry_computation_id(2);
  xla::HloComputationProto* body = m.add_computations();
  body->set_id(1);
  body->set_name(reduction);
  Instruction(body, 100, "parameter", Shape(xla::F32, {}))->set_parameter_number(0);
  Instruction(body, 101, "parameter", Shape(xla::F32, {}))->set_parameter_number(1);
  Instruction(body, 102, reduction, Shape(xla::F32, {}), {100, 101});
  body->set_root_id(102);
  xla::HloComputationProto* c = m.add_computations();
  c->set_id(2);
  c->set_name("main");
  Instruction(c, 10, "parameter", Shape(xla::F32, {n}))->set_parameter_number(0);
  Instruction(c, 11, "parameter", Shape(xla::F32, {}))->set_parameter_number(1);  // torch_xla's token
  xla::ShapeProto pair;
  pair.set_element_type(xla::TUPLE);
  *pair.add_tuple_shapes() = Shape(xla::F32, {n});
  *pair.add_tuple_shapes() = Shape(xla::F32, {});
  xla::HloInstructionProto* all_reduce = Instruction(c, 12, "all-reduce", pair, {10, 11});
  all_reduce->add_called_computation_ids(1);
  for (const auto& group : groups) {
    xla::ReplicaGroup* g = all_reduce->mutable_collective_device_list()->add_replica_groups();
    for (int64_t r : group) g->add_replica_ids(r);
  }
  Instruction(c, 13, "get-tuple-element", Shape(xla::F32, {n}), {12})->set_tuple_index(0);
  c->set_root_id(13);
  if (scale != 1.0) {
    Instruction(c, 14, "constant", Shape(xla::F32, {}))->mutable_literal()->add_f32s(static_cast<float>(scale));
    Instruction(c, 15, "broadcast", Shape(xla::F32, {n}), {14});
    Instruction(c, 16, "multiply", Shape(xla::F32, {n}), {13, 15});
    c->set_root_id(16);
  }
  return m;
}

}  // namespace xla_fork
