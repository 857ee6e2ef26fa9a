#include "cc/collectives/analysis.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace txe::collectives {
namespace {

constexpr char kStablehloPrefix[] = "stablehlo.";

struct Use {
  int64_t op_index;  // -1: main's return
  int64_t operand;
};

// Ops that only move or reshape a value: a scale constant may sit behind them.
bool IsTransparent(const std::string& name) {
  return name == "stablehlo.broadcast_in_dim" || name == "stablehlo.broadcast" ||
         name == "stablehlo.reshape" || name == "stablehlo.convert";
}

}  // namespace

const char* InputKindName(InputKind kind) {
  switch (kind) {
    case InputKind::kUserInput: return "user_input";
    case InputKind::kParameter: return "parameter";
    case InputKind::kBuffer: return "buffer";
    case InputKind::kConstant: return "constant";
    case InputKind::kCollectiveToken: return "collective_token";
  }
  return "unknown";
}

StatusOr<InputKind> InputKindFromName(const std::string& name) {
  for (InputKind k : {InputKind::kUserInput, InputKind::kParameter, InputKind::kBuffer,
                      InputKind::kConstant, InputKind::kCollectiveToken}) {
    if (name == InputKindName(k)) return k;
  }
  return InvalidArgumentError("unknown input kind '" + name +
                              "' (expected user_input, parameter, buffer, constant or "
                              "collective_token)");
}

std::string CollectiveName(const std::string& op_name) {
  static const char* const kCollectives[] = {"all_reduce",        "all_gather",
                                             "reduce_scatter",    "all_to_all",
                                             "collective_permute", "collective_broadcast"};
  if (op_name.rfind(kStablehloPrefix, 0) != 0) return "";
  std::string shortname = op_name.substr(sizeof(kStablehloPrefix) - 1);
  for (const char* c : kCollectives) {
    if (shortname == c) return shortname;
  }
  return "";
}

const std::vector<std::pair<std::string, std::string>>& ReduceNames() {
  static const auto* names = new std::vector<std::pair<std::string, std::string>>{
      {"stablehlo.add", "sum"}, {"stablehlo.multiply", "mul"}, {"stablehlo.and", "and"},
      {"stablehlo.or", "or"},   {"stablehlo.xor", "xor"},      {"stablehlo.minimum", "min"},
      {"stablehlo.maximum", "max"}};
  return *names;
}

std::string ReduceName(const std::string& reduction_op) {
  for (const auto& [op, name] : ReduceNames()) {
    if (reduction_op == op) return name;
  }
  return reduction_op;
}

StatusOr<Analysis> Analyze(const graph::Graph& graph, const std::vector<DeclaredInput>& declared) {
  TXE_RETURN_IF_ERROR(graph::Validate(graph));
  if (static_cast<int64_t>(declared.size()) != graph.num_args) {
    return InvalidArgumentError("declared inputs: " + std::to_string(declared.size()) +
                                " entries for a main with " + std::to_string(graph.num_args) +
                                " arguments");
  }
  const int64_t n = static_cast<int64_t>(graph.values.size());
  const int64_t num_ops = static_cast<int64_t>(graph.ops.size());

  // Def-use chains over main's top level.
  std::vector<std::vector<Use>> uses(n);
  std::vector<int64_t> def_op(n, -1), def_result(n, -1);
  for (int64_t i = 0; i < num_ops; ++i) {
    const graph::Op& op = graph.ops[i];
    for (size_t k = 0; k < op.operands.size(); ++k) uses[op.operands[k]].push_back({i, static_cast<int64_t>(k)});
    for (size_t k = 0; k < op.results.size(); ++k) {
      def_op[op.results[k]] = i;
      def_result[op.results[k]] = static_cast<int64_t>(k);
    }
  }
  for (size_t k = 0; k < graph.returned.size(); ++k) uses[graph.returned[k]].push_back({-1, static_cast<int64_t>(k)});

  // Token positions, found backwards so a token's consumers are decided before its producer.
  std::vector<std::vector<bool>> is_token(num_ops);
  for (int64_t i = num_ops - 1; i >= 0; --i) {
    const graph::Op& op = graph.ops[i];
    is_token[i].assign(op.operands.size(), false);
    if (CollectiveName(op.name).empty()) continue;
    const size_t paired = std::min(op.operands.size(), op.results.size());
    for (size_t k = 0; k < paired; ++k) {
      if (!graph.values[op.operands[k]].shape.empty()) continue;  // tokens are scalars
      bool only_token_uses = true;
      for (const Use& u : uses[op.results[k]]) {
        if (u.op_index < 0 || !is_token[u.op_index][u.operand]) {
          only_token_uses = false;
          break;
        }
      }
      // A collective whose every operand would be a "token" carries data: keep operand 0.
      is_token[i][k] = only_token_uses;
    }
    if (std::all_of(is_token[i].begin(), is_token[i].end(), [](bool b) { return b; }) &&
        !is_token[i].empty()) {
      is_token[i][0] = false;
    }
  }

  Analysis out;
  out.input_kinds.reserve(graph.num_args);
  for (const DeclaredInput& d : declared) out.input_kinds.push_back(d.kind);
  out.input_used.assign(graph.num_args, false);
  for (int64_t a = 0; a < graph.num_args; ++a) out.input_used[a] = !uses[a].empty();

  // Follows a value back through token chains to the main argument it comes from.
  auto token_source = [&](int64_t v) -> std::optional<int64_t> {
    while (true) {
      if (v < graph.num_args) return v;
      const int64_t op = def_op[v];
      const int64_t k = def_result[v];
      if (op < 0 || CollectiveName(graph.ops[op].name).empty() ||
          k >= static_cast<int64_t>(graph.ops[op].operands.size()) || !is_token[op][k]) {
        return std::nullopt;  // made inside the program
      }
      v = graph.ops[op].operands[k];
    }
  };

  // Scalar value of a value if it is a splat constant (or a declared scalar constant argument),
  // seen through broadcasts, reshapes and converts.
  auto constant_value = [&](int64_t v) -> std::optional<double> {
    while (true) {
      if (v < graph.num_args) {
        if (declared[v].kind == InputKind::kConstant) return declared[v].scalar_value;
        return std::nullopt;
      }
      const graph::Op& op = graph.ops[def_op[v]];
      if (op.name == "stablehlo.constant") return op.splat_value;
      if (!IsTransparent(op.name) || op.operands.size() != 1) return std::nullopt;
      v = op.operands[0];
    }
  };

  // Tokens mixed into a data operand: torch_xla's TokenHandler::GetInput adds the (always zero)
  // token, broadcast, to the operand of collectives without a token operand (all_gather,
  // reduce_scatter, ...). A scalar constant argument counts as such a token when every use of it
  // goes, through single-use broadcasts/converts, into an add whose result only feeds collectives'
  // data operands.
  std::vector<std::optional<int64_t>> mixed_token_of_op(num_ops);  // collective -> argument
  std::set<int64_t> token_inputs;
  for (int64_t arg = 0; arg < graph.num_args; ++arg) {
    if (!graph.values[arg].shape.empty() || declared[arg].kind != InputKind::kConstant || uses[arg].empty()) continue;
    std::vector<int64_t> consumers;
    bool all_mixed = true;
    for (const Use& first : uses[arg]) {
      Use u = first;
      int64_t v = arg;
      while (u.op_index >= 0 && IsTransparent(graph.ops[u.op_index].name) &&
             graph.ops[u.op_index].results.size() == 1 && uses[graph.ops[u.op_index].results[0]].size() == 1) {
        v = graph.ops[u.op_index].results[0];
        u = uses[v][0];
      }
      const bool is_add = u.op_index >= 0 && graph.ops[u.op_index].name == "stablehlo.add" &&
                          graph.ops[u.op_index].results.size() == 1;
      if (!is_add) { all_mixed = false; break; }
      const auto& add_uses = uses[graph.ops[u.op_index].results[0]];
      if (add_uses.empty()) { all_mixed = false; break; }
      for (const Use& au : add_uses) {
        if (au.op_index < 0 || CollectiveName(graph.ops[au.op_index].name).empty() ||
            is_token[au.op_index][au.operand]) {
          all_mixed = false;
          break;
        }
        consumers.push_back(au.op_index);
      }
      if (!all_mixed) break;
    }
    if (!all_mixed) continue;
    token_inputs.insert(arg);
    for (int64_t c : consumers) {
      if (!mixed_token_of_op[c]) mixed_token_of_op[c] = arg;
    }
  }

  std::vector<int64_t> visit_mark(n, -1);
  for (int64_t i = 0; i < num_ops; ++i) {
    const graph::Op& op = graph.ops[i];
    const std::string name = CollectiveName(op.name);
    if (name.empty()) continue;
    Collective c;
    c.op_index = i;
    c.op = name;
    if (!op.reduction.empty()) c.reduce = ReduceName(op.reduction);
    c.replica_groups = op.replica_groups;

    std::vector<int64_t> stack;
    for (size_t k = 0; k < op.operands.size(); ++k) {
      if (is_token[i][k]) {
        c.token_operands.push_back(static_cast<int64_t>(k));
        std::optional<int64_t> src = token_source(op.operands[k]);
        if (src && !c.token_input) c.token_input = src;
        if (src) token_inputs.insert(*src);
      } else {
        stack.push_back(op.operands[k]);
      }
    }
    // Arguments the data operands depend on (depth-first over defining ops).
    std::set<int64_t> deps;
    while (!stack.empty()) {
      const int64_t v = stack.back();
      stack.pop_back();
      if (visit_mark[v] == i) continue;
      visit_mark[v] = i;
      if (v < graph.num_args) {
        deps.insert(v);
        continue;
      }
      const int64_t d = def_op[v];
      if (d < 0) continue;
      const graph::Op& def = graph.ops[d];
      for (size_t k = 0; k < def.operands.size(); ++k) {
        if (!CollectiveName(def.name).empty() && is_token[d][k]) continue;
        stack.push_back(def.operands[k]);
      }
    }
    if (mixed_token_of_op[i]) {
      c.token_input = mixed_token_of_op[i];
      c.token_mixed_into_operand = true;
    }
    for (int64_t d : deps) {
      if (!token_inputs.count(d)) c.operand_inputs.push_back(d);
    }

    // Scale: the first data result's only use is a multiply by a constant s (torch_xla's
    // scale), or its division by a constant d (JAX's pmean divides the psum by the axis size):
    // the scale is s, or 1/d.
    for (size_t k = 0; k < op.results.size(); ++k) {
      if (k < is_token[i].size() && is_token[i][k]) continue;
      const auto& result_uses = uses[op.results[k]];
      if (result_uses.size() == 1 && result_uses[0].op_index >= 0) {
        const graph::Op& use = graph.ops[result_uses[0].op_index];
        if (use.name == "stablehlo.multiply" && use.operands.size() == 2) {
          const int64_t other = use.operands[1 - result_uses[0].operand];
          if (std::optional<double> s = constant_value(other)) {
            c.scale = *s;
            c.scale_op_index = result_uses[0].op_index;
          }
        } else if (use.name == "stablehlo.divide" && use.operands.size() == 2 &&
                   result_uses[0].operand == 0) {
          std::optional<double> d = constant_value(use.operands[1]);
          if (d && *d != 0.0) {
            c.scale = 1.0 / *d;
            c.scale_op_index = result_uses[0].op_index;
          }
        }
      }
      break;
    }
    out.collectives.push_back(std::move(c));
  }
  for (int64_t a : token_inputs) out.input_kinds[a] = InputKind::kCollectiveToken;
  out.token_inputs.assign(token_inputs.begin(), token_inputs.end());
  return out;
}

}  // namespace txe::collectives
