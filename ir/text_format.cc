#include "ir/text_format.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

// ---- character classes --------------------------------------------------------

bool IsIdentStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }
bool IsTensorNameChar(char c) {
  return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-' || c == '/';
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || !IsIdentStart(s[0])) return false;
  for (char c : s) {
    if (!IsIdentChar(c)) return false;
  }
  return true;
}

// ---- printing -------------------------------------------------------------------

// "..." with \" and \\ escaped; every other byte is written as is.
std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

// `%name`, or `%"..."` when the name has characters outside [A-Za-z0-9_.\-/].
std::string TensorRef(absl::string_view name) {
  bool bare = !name.empty();
  for (char c : name) bare &= IsTensorNameChar(c);
  return bare ? absl::StrCat("%", name) : absl::StrCat("%", Quote(name));
}

// Attribute and dim names: bare identifiers, else quoted.
std::string Word(absl::string_view s) { return IsIdentifier(s) ? std::string(s) : Quote(s); }

// "f32[b:2,16]" (dim names that are not identifiers are quoted).
std::string TypeText(const Shape& shape, DType dtype) {
  std::string out = absl::StrCat(DTypeName(dtype), "[");
  for (int i = 0; i < shape.rank(); ++i) {
    if (i > 0) out += ",";
    if (!shape.dim_name(i).empty()) absl::StrAppend(&out, Word(shape.dim_name(i)), ":");
    absl::StrAppend(&out, shape.dim(i));
  }
  out += "]";
  return out;
}

std::string OpText(const Graph& graph, const Op& op) {
  std::vector<std::string> results, args, types, attrs;
  for (TensorId id : op.outputs) {
    const Tensor& t = graph.tensor(id);
    results.push_back(TensorRef(t.name));
    std::string type = TypeText(t.shape, t.dtype);
    if (t.role != TensorRole::kActivation) absl::StrAppend(&type, " ", TensorRoleName(t.role));
    types.push_back(std::move(type));
  }
  for (TensorId id : op.inputs) args.push_back(TensorRef(graph.tensor(id).name));
  for (const auto& [name, value] : op.attrs.values()) {
    attrs.push_back(absl::StrCat(Word(name), "=", AttrValueToString(value)));
  }
  std::string out = absl::StrCat(absl::StrJoin(results, ", "), results.empty() ? "= " : " = ",
                                 OpKindName(op.kind), "(", absl::StrJoin(args, ", "), ")");
  if (!attrs.empty()) absl::StrAppend(&out, " {", absl::StrJoin(attrs, ", "), "}");
  absl::StrAppend(&out, " :", types.empty() ? "" : " ", absl::StrJoin(types, ", "), " @",
                  PhaseName(op.info.phase));
  if (op.info.layer != -1) absl::StrAppend(&out, " layer=", op.info.layer);
  if (op.info.microbatch != -1) absl::StrAppend(&out, " mb=", op.info.microbatch);
  return out;
}

// ---- tokens ------------------------------------------------------------------------

enum class TokKind { kEnd, kIdent, kTensor, kString, kInt, kFloat, kPunct };

struct Token {
  TokKind kind = TokKind::kEnd;
  std::string text;  // decoded for strings and tensor names; the character for punctuation
  int line = 1;
  int col = 1;
};

// "'x'" for printable characters, "'\x01'" otherwise.
std::string DescribeChar(char c) {
  if (absl::ascii_isprint(c)) return absl::StrCat("'", std::string(1, c), "'");
  return absl::StrFormat("'\\x%02x'", static_cast<unsigned char>(c));
}

// Parser over a token list. Builds the graph through Graph::AddInput /
// Graph::AddOp, so every op is shape-checked as it is read.
class Parser {
 public:
  Parser(absl::string_view text, absl::string_view filename)
      : text_(text), filename_(filename) {}

  absl::StatusOr<Graph> Parse();

 private:
  absl::Status ErrorAt(int line, int col, absl::string_view message,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument) const {
    return absl::Status(code, absl::StrCat(filename_, ":", line, ":", col, ": ", message));
  }
  absl::Status ErrorAt(const Token& t, absl::string_view message,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument) const {
    return ErrorAt(t.line, t.col, message, code);
  }

  absl::Status Tokenize();
  absl::Status LexNumber(size_t& i, int& col, Token& tok);
  absl::Status LexString(size_t& i, int& line, int& col, std::string& out);

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  static bool IsPunct(const Token& t, char c) {
    return t.kind == TokKind::kPunct && t.text[0] == c;
  }
  static bool IsKeyword(const Token& t, absl::string_view word) {
    return t.kind == TokKind::kIdent && t.text == word;
  }
  absl::Status Expect(char c);

  absl::StatusOr<int64_t> IntValue(const Token& t) const;
  absl::StatusOr<int> SmallIntValue(const Token& t) const;
  absl::StatusOr<double> FloatValue(const Token& t) const;
  absl::StatusOr<TensorId> TensorUse();
  absl::StatusOr<TensorType> Type();
  absl::StatusOr<AttrValue> AttrValueLiteral();
  absl::StatusOr<AttrMap> Attrs();
  absl::Status Statement();
  absl::Status Declaration(const Token& name, const Token& role);
  absl::Status Operation(const std::vector<Token>& results, const Token& head);
  absl::Status OpInfoTags(OpInfo& info);
  absl::Status Outputs();

  absl::string_view text_;
  std::string filename_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  Graph graph_;
};

// ---- lexer ----------------------------------------------------------------------------

absl::Status Parser::Tokenize() {
  size_t i = 0;
  int line = 1, col = 1;
  const size_t n = text_.size();
  while (i < n) {
    char c = text_[i];
    if (c == '\n') {
      ++line;
      col = 1;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++col;
      ++i;
      continue;
    }
    if (c == '#') {
      while (i < n && text_[i] != '\n') ++i;
      continue;
    }
    Token tok;
    tok.line = line;
    tok.col = col;
    if (IsIdentStart(c)) {
      size_t start = i;
      while (i < n && IsIdentChar(text_[i])) ++i;
      tok.kind = TokKind::kIdent;
      tok.text = std::string(text_.substr(start, i - start));
      col += static_cast<int>(i - start);
    } else if (absl::ascii_isdigit(c) ||
               (c == '-' && i + 1 < n && absl::ascii_isdigit(text_[i + 1]))) {
      LOOM_RETURN_IF_ERROR(LexNumber(i, col, tok));
    } else if (c == '-' && text_.substr(i, 4) == "-inf" &&
               (i + 4 >= n || !IsIdentChar(text_[i + 4]))) {
      tok.kind = TokKind::kFloat;
      tok.text = "-inf";
      i += 4;
      col += 4;
    } else if (c == '"') {
      tok.kind = TokKind::kString;
      LOOM_RETURN_IF_ERROR(LexString(i, line, col, tok.text));
    } else if (c == '%') {
      ++i;
      ++col;
      tok.kind = TokKind::kTensor;
      if (i < n && text_[i] == '"') {
        LOOM_RETURN_IF_ERROR(LexString(i, line, col, tok.text));
        if (tok.text.empty()) return ErrorAt(tok, "tensor name is empty");
      } else {
        size_t start = i;
        while (i < n && IsTensorNameChar(text_[i])) ++i;
        if (i == start) return ErrorAt(tok, "expected a tensor name after '%'");
        tok.text = std::string(text_.substr(start, i - start));
        col += static_cast<int>(i - start);
      }
    } else if (c != '\0' && std::strchr("=(){}[],:@", c) != nullptr) {
      tok.kind = TokKind::kPunct;
      tok.text = std::string(1, c);
      ++i;
      ++col;
    } else {
      return ErrorAt(tok, absl::StrCat("unexpected character ", DescribeChar(c)));
    }
    tokens_.push_back(std::move(tok));
  }
  Token end;
  end.line = line;
  end.col = col;
  tokens_.push_back(end);
  return absl::OkStatus();
}

// -?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?
absl::Status Parser::LexNumber(size_t& i, int& col, Token& tok) {
  const size_t n = text_.size();
  size_t start = i;
  auto digits = [&] {
    while (i < n && absl::ascii_isdigit(text_[i])) ++i;
  };
  if (text_[i] == '-') ++i;
  digits();
  bool is_float = false;
  if (i < n && text_[i] == '.') {
    is_float = true;
    ++i;
    digits();
  }
  if (i < n && (text_[i] == 'e' || text_[i] == 'E')) {
    is_float = true;
    ++i;
    if (i < n && (text_[i] == '+' || text_[i] == '-')) ++i;
    size_t exp_start = i;
    digits();
    if (i == exp_start) {
      return ErrorAt(tok, absl::StrCat("malformed number '",
                                       text_.substr(start, i - start), "'"));
    }
  }
  if (i < n && (IsIdentChar(text_[i]) || text_[i] == '.')) {
    while (i < n && (IsIdentChar(text_[i]) || text_[i] == '.')) ++i;
    return ErrorAt(tok, absl::StrCat("malformed number '",
                                     text_.substr(start, i - start), "'"));
  }
  tok.kind = is_float ? TokKind::kFloat : TokKind::kInt;
  tok.text = std::string(text_.substr(start, i - start));
  col += static_cast<int>(i - start);
  return absl::OkStatus();
}

// A double-quoted string starting at text_[i]; only \" and \\ are escapes.
absl::Status Parser::LexString(size_t& i, int& line, int& col, std::string& out) {
  const int start_line = line, start_col = col;
  const size_t n = text_.size();
  ++i;
  ++col;
  while (true) {
    if (i >= n) return ErrorAt(start_line, start_col, "unterminated string");
    char c = text_[i];
    if (c == '"') {
      ++i;
      ++col;
      return absl::OkStatus();
    }
    if (c == '\\') {
      if (i + 1 >= n) return ErrorAt(start_line, start_col, "unterminated string");
      char e = text_[i + 1];
      if (e != '"' && e != '\\') {
        return ErrorAt(line, col, absl::StrCat("invalid escape '\\", std::string(1, e),
                                               "' in string (only \\\" and \\\\ are allowed)"));
      }
      out += e;
      i += 2;
      col += 2;
      continue;
    }
    out += c;
    ++i;
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
}

// ---- parser ----------------------------------------------------------------------------

absl::Status Parser::Expect(char c) {
  const Token& t = Peek();
  if (!IsPunct(t, c)) return ErrorAt(t, absl::StrCat("expected '", std::string(1, c), "'"));
  Next();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Parser::IntValue(const Token& t) const {
  if (t.kind != TokKind::kInt) return ErrorAt(t, "expected an integer");
  int64_t v;
  if (!absl::SimpleAtoi(t.text, &v)) {
    return ErrorAt(t, absl::StrCat("integer ", t.text, " is out of range"));
  }
  return v;
}

absl::StatusOr<int> Parser::SmallIntValue(const Token& t) const {
  LOOM_ASSIGN_OR_RETURN(int64_t v, IntValue(t));
  if (v < INT_MIN || v > INT_MAX) {
    return ErrorAt(t, absl::StrCat("integer ", t.text, " is out of range"));
  }
  return static_cast<int>(v);
}

absl::StatusOr<double> Parser::FloatValue(const Token& t) const {
  if (t.kind == TokKind::kIdent && t.text == "inf") return HUGE_VAL;
  if (t.kind == TokKind::kIdent && t.text == "nan") return std::nan("");
  if (t.text == "-inf") return -HUGE_VAL;
  errno = 0;
  double v = std::strtod(t.text.c_str(), nullptr);
  // ERANGE also flags exact subnormals, so only an overflow to infinity is an error.
  if (errno == ERANGE && std::isinf(v)) {
    return ErrorAt(t, absl::StrCat("float ", t.text, " is out of range"));
  }
  return v;
}

absl::StatusOr<TensorId> Parser::TensorUse() {
  const Token& t = Next();
  if (t.kind != TokKind::kTensor) return ErrorAt(t, "expected a tensor name");
  std::optional<TensorId> id = graph_.FindTensor(t.text);
  if (!id) return ErrorAt(t, absl::StrCat("unknown tensor '", TensorRef(t.text), "'"));
  return *id;
}

// dtype '[' [dim (',' dim)*] ']' with dim = [name ':'] integer.
absl::StatusOr<TensorType> Parser::Type() {
  const Token& head = Next();
  if (head.kind != TokKind::kIdent) return ErrorAt(head, "expected a type such as f32[2,3]");
  auto dtype = ParseDType(head.text);
  if (!dtype.ok()) return ErrorAt(head, dtype.status().message());
  LOOM_RETURN_IF_ERROR(Expect('['));
  std::vector<int64_t> dims;
  std::vector<std::string> names;
  if (!IsPunct(Peek(), ']')) {
    while (true) {
      std::string name;
      if ((Peek().kind == TokKind::kIdent || Peek().kind == TokKind::kString) &&
          IsPunct(Peek(1), ':')) {
        name = Next().text;
        Next();
      }
      const Token& size = Next();
      if (size.kind != TokKind::kInt) return ErrorAt(size, "expected a dim size");
      LOOM_ASSIGN_OR_RETURN(int64_t d, IntValue(size));
      dims.push_back(d);
      names.push_back(std::move(name));
      if (!IsPunct(Peek(), ',')) break;
      Next();
    }
  }
  LOOM_RETURN_IF_ERROR(Expect(']'));
  return TensorType{Shape(std::move(dims), std::move(names)), *dtype};
}

absl::StatusOr<AttrValue> Parser::AttrValueLiteral() {
  const Token& t = Next();
  switch (t.kind) {
    case TokKind::kInt: {
      LOOM_ASSIGN_OR_RETURN(int64_t v, IntValue(t));
      return AttrValue(v);
    }
    case TokKind::kFloat: {
      LOOM_ASSIGN_OR_RETURN(double v, FloatValue(t));
      return AttrValue(v);
    }
    case TokKind::kString:
      return AttrValue(t.text);
    case TokKind::kIdent:
      if (t.text == "inf" || t.text == "nan") {
        LOOM_ASSIGN_OR_RETURN(double v, FloatValue(t));
        return AttrValue(v);
      }
      break;
    case TokKind::kPunct:
      if (t.text == "[") {
        std::vector<int64_t> values;
        if (!IsPunct(Peek(), ']')) {
          while (true) {
            LOOM_ASSIGN_OR_RETURN(int64_t v, IntValue(Next()));
            values.push_back(v);
            if (!IsPunct(Peek(), ',')) break;
            Next();
          }
        }
        LOOM_RETURN_IF_ERROR(Expect(']'));
        return AttrValue(std::move(values));
      }
      break;
    default:
      break;
  }
  return ErrorAt(t, "expected an attribute value (integer, float, [integers] or string)");
}

// '{' [name '=' value (',' name '=' value)*] '}'
absl::StatusOr<AttrMap> Parser::Attrs() {
  LOOM_RETURN_IF_ERROR(Expect('{'));
  AttrMap attrs;
  if (!IsPunct(Peek(), '}')) {
    while (true) {
      const Token& name = Next();
      if (name.kind != TokKind::kIdent && name.kind != TokKind::kString) {
        return ErrorAt(name, "expected an attribute name");
      }
      if (attrs.Has(name.text)) {
        return ErrorAt(name, absl::StrCat("duplicate attribute '", name.text, "'"));
      }
      LOOM_RETURN_IF_ERROR(Expect('='));
      LOOM_ASSIGN_OR_RETURN(AttrValue value, AttrValueLiteral());
      attrs.Set(name.text, std::move(value));
      if (!IsPunct(Peek(), ',')) break;
      Next();
    }
  }
  LOOM_RETURN_IF_ERROR(Expect('}'));
  return attrs;
}

absl::StatusOr<Graph> Parser::Parse() {
  LOOM_RETURN_IF_ERROR(Tokenize());
  if (!IsKeyword(Peek(), "graph")) return ErrorAt(Peek(), "expected 'graph'");
  Next();
  const Token& name = Next();
  if (name.kind != TokKind::kString) {
    return ErrorAt(name, "expected the graph name as a quoted string");
  }
  graph_.set_name(name.text);
  LOOM_RETURN_IF_ERROR(Expect('{'));
  while (!IsPunct(Peek(), '}')) {
    if (Peek().kind == TokKind::kEnd) return ErrorAt(Peek(), "expected '}'");
    LOOM_RETURN_IF_ERROR(Statement());
  }
  Next();
  if (Peek().kind != TokKind::kEnd) return ErrorAt(Peek(), "expected end of input");
  return std::move(graph_);
}

absl::Status Parser::Statement() {
  if (IsKeyword(Peek(), "output")) return Outputs();
  if (Peek().kind != TokKind::kTensor && !IsPunct(Peek(), '=')) {
    return ErrorAt(Peek(), "expected a tensor definition, 'output' or '}'");
  }
  // Result names, checked for redefinition as they are read.
  std::vector<Token> results;
  while (Peek().kind == TokKind::kTensor) {
    const Token& t = Next();
    bool repeated = false;
    for (const Token& r : results) repeated |= r.text == t.text;
    if (repeated || graph_.FindTensor(t.text)) {
      return ErrorAt(t, absl::StrCat("tensor '", TensorRef(t.text), "' is already defined"));
    }
    results.push_back(t);
    if (!IsPunct(Peek(), ',')) break;
    Next();
    if (Peek().kind != TokKind::kTensor) return ErrorAt(Peek(), "expected a tensor name");
  }
  LOOM_RETURN_IF_ERROR(Expect('='));
  const Token& head = Next();
  if (head.kind != TokKind::kIdent) return ErrorAt(head, "expected an op or role name");
  bool is_op = IsPunct(Peek(), '(') || ParseOpKind(head.text).ok();
  if (is_op) return Operation(results, head);
  if (results.size() == 1) return Declaration(results[0], head);
  if (ParseTensorRole(head.text).ok()) {
    return ErrorAt(head, "a declaration defines exactly one tensor");
  }
  return ErrorAt(head, absl::StrCat("unknown op '", head.text, "'"));
}

// %name = ROLE TYPE
absl::Status Parser::Declaration(const Token& name, const Token& role_tok) {
  auto role = ParseTensorRole(role_tok.text);
  if (!role.ok()) return ErrorAt(role_tok, role.status().message());
  LOOM_ASSIGN_OR_RETURN(TensorType type, Type());
  auto id = graph_.AddInput(name.text, std::move(type.shape), type.dtype, *role);
  if (!id.ok()) return ErrorAt(name, id.status().message(), id.status().code());
  return absl::OkStatus();
}

// RESULTS = KIND(ARGS) [ATTRS] : TYPES @PHASE [layer=N] [mb=N]
absl::Status Parser::Operation(const std::vector<Token>& results, const Token& head) {
  auto kind = ParseOpKind(head.text);
  if (!kind.ok()) return ErrorAt(head, kind.status().message());
  LOOM_RETURN_IF_ERROR(Expect('('));
  std::vector<TensorId> inputs;
  if (!IsPunct(Peek(), ')')) {
    while (true) {
      LOOM_ASSIGN_OR_RETURN(TensorId id, TensorUse());
      inputs.push_back(id);
      if (!IsPunct(Peek(), ',')) break;
      Next();
    }
  }
  LOOM_RETURN_IF_ERROR(Expect(')'));
  AttrMap attrs;
  if (IsPunct(Peek(), '{')) {
    LOOM_ASSIGN_OR_RETURN(attrs, Attrs());
  }
  LOOM_RETURN_IF_ERROR(Expect(':'));
  const Token types_start = Peek();
  std::vector<TensorType> types;
  std::vector<Token> type_tokens;
  std::vector<OutputSpec> specs;
  if (!IsPunct(Peek(), '@')) {
    while (true) {
      type_tokens.push_back(Peek());
      LOOM_ASSIGN_OR_RETURN(TensorType type, Type());
      types.push_back(std::move(type));
      OutputSpec spec;
      if (Peek().kind == TokKind::kIdent) {
        const Token& role_tok = Next();
        auto role = ParseTensorRole(role_tok.text);
        if (!role.ok()) return ErrorAt(role_tok, role.status().message());
        spec.role = *role;
      }
      specs.push_back(std::move(spec));
      if (!IsPunct(Peek(), ',')) break;
      Next();
    }
  }
  LOOM_RETURN_IF_ERROR(Expect('@'));
  const Token& phase_tok = Next();
  if (phase_tok.kind != TokKind::kIdent) return ErrorAt(phase_tok, "expected a phase name");
  auto phase = ParsePhase(phase_tok.text);
  if (!phase.ok()) return ErrorAt(phase_tok, phase.status().message());
  OpInfo info;
  info.phase = *phase;
  LOOM_RETURN_IF_ERROR(OpInfoTags(info));

  if (types.size() != results.size()) {
    return ErrorAt(types_start, absl::StrCat("expected ", results.size(),
                                             " result types, got ", types.size()));
  }
  for (size_t i = 0; i < results.size(); ++i) specs[i].name = results[i].text;
  auto ids = graph_.AddOp(*kind, std::move(inputs), std::move(attrs), info, std::move(specs));
  if (!ids.ok()) return ErrorAt(head, ids.status().message(), ids.status().code());
  for (size_t i = 0; i < ids->size(); ++i) {
    const Tensor& t = graph_.tensor((*ids)[i]);
    if (!t.shape.SameDims(types[i].shape) || t.dtype != types[i].dtype) {
      return ErrorAt(type_tokens[i],
                     absl::StrCat("result type ", types[i].ToString(),
                                  " does not match inferred ", t.type().ToString()));
    }
    graph_.SetDimNames(t.id, types[i].shape);  // the written dim names, exactly
  }
  return absl::OkStatus();
}

// [layer=N] [mb=N], each at most once.
absl::Status Parser::OpInfoTags(OpInfo& info) {
  bool seen_layer = false, seen_mb = false;
  while (IsKeyword(Peek(), "layer") || IsKeyword(Peek(), "mb")) {
    const Token& key = Next();
    bool& seen = key.text == "layer" ? seen_layer : seen_mb;
    if (seen) return ErrorAt(key, absl::StrCat("duplicate '", key.text, "'"));
    seen = true;
    LOOM_RETURN_IF_ERROR(Expect('='));
    LOOM_ASSIGN_OR_RETURN(int v, SmallIntValue(Next()));
    (key.text == "layer" ? info.layer : info.microbatch) = v;
  }
  return absl::OkStatus();
}

// output %a, %b
absl::Status Parser::Outputs() {
  Next();
  while (true) {
    LOOM_ASSIGN_OR_RETURN(TensorId id, TensorUse());
    graph_.AddOutput(id);
    if (!IsPunct(Peek(), ',')) break;
    Next();
  }
  return absl::OkStatus();
}

}  // namespace

std::string PrintGraph(const Graph& graph) {
  std::string out = absl::StrCat("graph ", Quote(graph.name()), " {\n");
  // Tensor-id order; ops print at their first output. Ops without outputs print
  // before the next op, which keeps op ids too.
  OpId next_op = 0;
  auto print_ops_through = [&](OpId last) {
    for (; next_op <= last && next_op < graph.num_ops(); ++next_op) {
      absl::StrAppend(&out, "  ", OpText(graph, graph.op(next_op)), "\n");
    }
  };
  for (const Tensor& t : graph.tensors()) {
    if (t.producer == kNoId) {
      absl::StrAppend(&out, "  ", TensorRef(t.name), " = ", TensorRoleName(t.role), " ",
                      TypeText(t.shape, t.dtype), "\n");
    } else if (t.output_index == 0) {
      print_ops_through(t.producer);
    }
  }
  print_ops_through(graph.num_ops() - 1);
  std::vector<std::string> outputs;
  for (TensorId id : graph.outputs()) {
    if (id >= 0 && id < graph.num_tensors()) outputs.push_back(TensorRef(graph.tensor(id).name));
  }
  if (!outputs.empty()) absl::StrAppend(&out, "  output ", absl::StrJoin(outputs, ", "), "\n");
  out += "}\n";
  return out;
}

absl::StatusOr<Graph> ParseGraph(absl::string_view text, absl::string_view filename) {
  return Parser(text, filename).Parse();
}

}  // namespace loom::ir
