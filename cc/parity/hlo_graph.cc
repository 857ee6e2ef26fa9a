#include "cc/parity/hlo_graph.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <unordered_set>

namespace txe::parity {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Removes /*...*/ comments (HLO text puts "/*index=5*/" inside long operand lists).
std::string StripComments(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      if (end == std::string_view::npos) break;
      i = end + 1;
      continue;
    }
    out.push_back(text[i]);
  }
  return out;
}

// Index just past the bracket group opening at s[start], or npos when unbalanced. Brackets
// inside "strings" (frontend attributes, metadata) do not count.
size_t MatchBracket(std::string_view s, size_t start) {
  std::vector<char> stack;
  bool in_string = false;
  for (size_t i = start; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '(': stack.push_back(')'); break;
      case '{': stack.push_back('}'); break;
      case '[': stack.push_back(']'); break;
      case ')':
      case '}':
      case ']':
        if (stack.empty() || stack.back() != c) return std::string_view::npos;
        stack.pop_back();
        if (stack.empty()) return i + 1;
        break;
      default: break;
    }
  }
  return std::string_view::npos;
}

// Splits on commas outside brackets and strings; parts are trimmed, empty parts dropped.
std::vector<std::string_view> SplitTopLevel(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  bool in_string = false;
  size_t begin = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '(' || c == '{' || c == '[') {
      ++depth;
    } else if (c == ')' || c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 0) {
      std::string_view part = Trim(s.substr(begin, i - begin));
      if (!part.empty()) parts.push_back(part);
      begin = i + 1;
    }
  }
  std::string_view part = Trim(s.substr(begin));
  if (!part.empty()) parts.push_back(part);
  return parts;
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

Status LineError(int line, std::string_view what, std::string_view text) {
  std::string snippet(text.substr(0, 120));
  return InvalidArgumentError("HLO text line " + std::to_string(line) + ": " + std::string(what) +
                              ": " + snippet);
}

StatusOr<HloShape> ParseShape(std::string_view text) {
  text = Trim(text);
  HloShape shape;
  if (!text.empty() && text.front() == '(') {
    size_t end = MatchBracket(text, 0);
    if (end == std::string_view::npos) return InvalidArgumentError("unbalanced tuple shape");
    for (std::string_view part : SplitTopLevel(text.substr(1, end - 2))) {
      TXE_ASSIGN_OR_RETURN(HloShape element, ParseShape(part));
      shape.tuple_shapes.push_back(std::move(element));
    }
    return shape;
  }
  size_t bracket = text.find('[');
  if (bracket == std::string_view::npos || bracket == 0) {
    return InvalidArgumentError("cannot read shape '" + std::string(text) + "'");
  }
  shape.element_type = std::string(text.substr(0, bracket));
  size_t close = text.find(']', bracket);
  if (close == std::string_view::npos) return InvalidArgumentError("unterminated shape");
  for (std::string_view dim : SplitTopLevel(text.substr(bracket + 1, close - bracket - 1))) {
    if (StartsWith(dim, "<=")) dim.remove_prefix(2);  // bounded dynamic dimension
    char* end = nullptr;
    std::string d(dim);
    long long value = std::strtoll(d.c_str(), &end, 10);
    if (end == d.c_str() || *end != '\0') {
      return InvalidArgumentError("cannot read dimension '" + d + "'");
    }
    shape.dims.push_back(value);
  }
  return shape;
}

// "[ROOT ]%name = shape opcode(operands), key=value, ..."
StatusOr<HloInstruction> ParseInstruction(std::string_view line, int line_number) {
  HloInstruction ins;
  std::string_view rest = Trim(line);
  if (StartsWith(rest, "ROOT ")) {
    ins.is_root = true;
    rest = Trim(rest.substr(5));
  }
  size_t eq = rest.find('=');
  if (eq == std::string_view::npos) return LineError(line_number, "expected 'name = ...'", line);
  std::string_view name = Trim(rest.substr(0, eq));
  if (StartsWith(name, "%")) name.remove_prefix(1);
  if (name.empty() || !std::all_of(name.begin(), name.end(), IsNameChar)) {
    return LineError(line_number, "bad instruction name", line);
  }
  ins.name = std::string(name);
  rest = Trim(rest.substr(eq + 1));

  size_t shape_end = 0;
  if (!rest.empty() && rest.front() == '(') {
    shape_end = MatchBracket(rest, 0);
    if (shape_end == std::string_view::npos) return LineError(line_number, "unbalanced shape", line);
  } else {
    shape_end = rest.find(' ');
    if (shape_end == std::string_view::npos) return LineError(line_number, "expected an opcode", line);
  }
  StatusOr<HloShape> shape = ParseShape(rest.substr(0, shape_end));
  if (!shape.ok()) return LineError(line_number, shape.status().message(), line);
  ins.shape = std::move(shape).value();
  rest = Trim(rest.substr(shape_end));

  size_t open = 0;
  while (open < rest.size() && IsNameChar(rest[open])) ++open;
  if (open == 0 || open >= rest.size() || rest[open] != '(') {
    return LineError(line_number, "expected opcode(operands)", line);
  }
  ins.opcode = std::string(rest.substr(0, open));
  size_t close = MatchBracket(rest, open);
  if (close == std::string_view::npos) return LineError(line_number, "unbalanced operand list", line);
  std::string_view inside = rest.substr(open + 1, close - open - 2);
  if (ins.opcode == "constant" || ins.opcode == "parameter" || ins.opcode == "iota") {
    ins.literal = std::string(Trim(inside));
  } else {
    for (std::string_view operand : SplitTopLevel(inside)) {
      size_t pct = operand.rfind('%');
      if (pct == std::string_view::npos) continue;  // e.g. inline literals; not an instruction
      std::string_view ref = operand.substr(pct + 1);
      size_t n = 0;
      while (n < ref.size() && IsNameChar(ref[n])) ++n;
      ins.operands.emplace_back(ref.substr(0, n));
    }
  }
  std::string_view attrs = Trim(rest.substr(close));
  if (StartsWith(attrs, ",")) attrs.remove_prefix(1);
  for (std::string_view part : SplitTopLevel(attrs)) {
    size_t k = part.find('=');
    if (k == std::string_view::npos) {
      ins.attributes.emplace_back(std::string(part), "");
    } else {
      ins.attributes.emplace_back(std::string(Trim(part.substr(0, k))), std::string(Trim(part.substr(k + 1))));
    }
  }
  return ins;
}

}  // namespace

std::string HloShape::ToString() const {
  std::string s;
  if (is_tuple()) {
    s = "(";
    for (size_t i = 0; i < tuple_shapes.size(); ++i) {
      if (i) s += ", ";
      s += tuple_shapes[i].ToString();
    }
    return s + ")";
  }
  s = element_type + "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

const std::string* HloInstruction::FindAttribute(std::string_view key) const {
  for (const auto& [k, v] : attributes) {
    if (k == key) return &v;
  }
  return nullptr;
}

const HloInstruction* HloComputation::Find(std::string_view instruction_name) const {
  auto it = index_.find(std::string(instruction_name));
  return it == index_.end() ? nullptr : &instructions[it->second];
}

void HloComputation::Reindex() {
  index_.clear();
  for (size_t i = 0; i < instructions.size(); ++i) index_[instructions[i].name] = i;
}

const HloComputation* HloModule::FindComputation(std::string_view computation_name) const {
  if (StartsWith(computation_name, "%")) computation_name.remove_prefix(1);
  for (const HloComputation& c : computations) {
    if (c.name == computation_name) return &c;
  }
  return nullptr;
}

StatusOr<HloModule> ParseHloText(std::string_view raw) {
  std::string text = StripComments(raw);
  HloModule module;
  bool have_entry = false;
  HloComputation* current = nullptr;
  int line_number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line = Trim(std::string_view(text).substr(pos, eol - pos));
    pos = eol + 1;
    ++line_number;
    if (line.empty()) continue;
    if (current == nullptr) {
      if (StartsWith(line, "HloModule")) {
        std::string_view name = Trim(line.substr(9));
        size_t end = 0;
        while (end < name.size() && IsNameChar(name[end])) ++end;
        module.name = std::string(name.substr(0, end));
        continue;
      }
      if (line.back() != '{') continue;  // e.g. stray text between computations
      bool is_entry = StartsWith(line, "ENTRY ");
      std::string_view header = is_entry ? Trim(line.substr(6)) : line;
      if (StartsWith(header, "%")) header.remove_prefix(1);
      size_t end = 0;
      while (end < header.size() && IsNameChar(header[end])) ++end;
      if (end == 0) return LineError(line_number, "expected a computation name", line);
      module.computations.emplace_back();
      current = &module.computations.back();
      current->name = std::string(header.substr(0, end));
      current->is_entry = is_entry;
      if (is_entry) {
        if (have_entry) return LineError(line_number, "a second ENTRY computation", line);
        module.entry = module.computations.size() - 1;
        have_entry = true;
      }
      continue;
    }
    if (line == "}") {
      if (current->root.empty() && !current->instructions.empty()) {
        current->root = current->instructions.back().name;
      }
      current->Reindex();
      current = nullptr;
      continue;
    }
    TXE_ASSIGN_OR_RETURN(HloInstruction ins, ParseInstruction(line, line_number));
    if (ins.is_root) current->root = ins.name;
    current->instructions.push_back(std::move(ins));
  }
  if (current != nullptr) {
    return InvalidArgumentError("HLO text ends inside computation '" + current->name + "'");
  }
  if (!have_entry) return InvalidArgumentError("HLO text has no ENTRY computation");
  return module;
}

bool IsArithmeticOpcode(std::string_view opcode) {
  static const auto* kOps = new std::unordered_set<std::string_view>{
      "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder",
      "atan2", "negate", "abs", "exponential", "exponential-minus-one", "log", "log-plus-one",
      "sqrt", "rsqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil",
      "round-nearest-even", "round-nearest-afz", "sign", "dot", "convolution", "reduce",
      "reduce-window", "clamp", "erf"};
  return kOps->count(opcode) > 0;
}

bool IsLayoutOpcode(std::string_view opcode) {
  static const auto* kOps = new std::unordered_set<std::string_view>{
      "reshape", "broadcast", "transpose", "copy", "bitcast", "slice", "get-tuple-element"};
  return kOps->count(opcode) > 0;
}

bool IsNarrowFloat(std::string_view element_type) {
  return element_type == "bf16" || element_type == "f16";
}

bool IsElementwiseOpcode(std::string_view opcode) {
  static const auto* kOps = new std::unordered_set<std::string_view>{
      "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder",
      "atan2", "negate", "abs", "exponential", "exponential-minus-one", "log", "log-plus-one",
      "sqrt", "rsqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil",
      "round-nearest-even", "round-nearest-afz", "sign", "clamp", "erf", "select"};
  return kOps->count(opcode) > 0;
}

namespace {

// Narrow-float elementwise ops whose every user converts them to a wider float.
std::unordered_set<std::string> WidenedOps(const HloComputation& comp) {
  std::unordered_map<std::string, std::vector<const HloInstruction*>> users;
  for (const HloInstruction& ins : comp.instructions) {
    for (const std::string& o : ins.operands) users[o].push_back(&ins);
  }
  std::unordered_set<std::string> widened;
  for (const HloInstruction& ins : comp.instructions) {
    if (!IsNarrowFloat(ins.shape.element_type) || !IsElementwiseOpcode(ins.opcode) || ins.name == comp.root) {
      continue;
    }
    auto it = users.find(ins.name);
    if (it == users.end()) continue;
    bool all_widen = std::all_of(it->second.begin(), it->second.end(), [](const HloInstruction* u) {
      return u->opcode == "convert" && (u->shape.element_type == "f32" || u->shape.element_type == "f64");
    });
    if (all_widen) widened.insert(ins.name);
  }
  return widened;
}

}  // namespace

std::vector<RoundingPoint> FindRoundingPoints(const HloModule& module, const RoundingPointOptions& options) {
  std::vector<RoundingPoint> points;
  for (const HloComputation& comp : module.computations) {
    std::unordered_set<std::string> widened;
    if (options.excess_precision) widened = WidenedOps(comp);
    for (const HloInstruction& ins : comp.instructions) {
      if (!IsArithmeticOpcode(ins.opcode) || !IsNarrowFloat(ins.shape.element_type)) continue;
      if (widened.count(ins.name)) continue;
      RoundingPoint p{comp.name, ins.name, ins.opcode, ins.shape.element_type, "", ""};
      for (const std::string& operand : ins.operands) {
        const HloInstruction* src = comp.Find(operand);
        // Follow layout ops back to the op that computed the value (bounded: HLO is a DAG).
        for (size_t hops = 0; src && IsLayoutOpcode(src->opcode) && !src->operands.empty() &&
                              hops < comp.instructions.size();
             ++hops) {
          src = comp.Find(src->operands.front());
        }
        if (src && IsArithmeticOpcode(src->opcode) && IsNarrowFloat(src->shape.element_type) &&
            !widened.count(src->name)) {
          p.after = src->name;
          p.after_opcode = src->opcode;
          break;
        }
      }
      points.push_back(std::move(p));
    }
  }
  return points;
}

}  // namespace txe::parity
