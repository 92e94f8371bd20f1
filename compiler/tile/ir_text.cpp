// Tile IR v2 as text: the printer and the parser that reads it back.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <map>

#include "compiler/support/error.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

namespace {

// ---- printing ----

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  return fmt::format("{}", v);
}

// Values are printed numbered in the order the text defines them, so that printing a parsed
// program gives the same text.
class Names {
 public:
  explicit Names(const Program& p) { number(p.body); }
  std::string operator()(int id) const { return fmt::format("%{}", at_.at(id)); }
  std::string operator()(const std::vector<int>& ids) const {
    std::vector<std::string> s;
    for (int i : ids) s.push_back((*this)(i));
    return fmt::format("{}", fmt::join(s, ", "));
  }

 private:
  void number(const Region& r) {
    for (const Inst& i : r.body) {
      for (int v : i.results) at_[v] = next_++;
      for (const Region& inner : i.regions) {
        for (int v : inner.args) at_[v] = next_++;
        number(inner);
      }
    }
  }
  std::map<int, int> at_;
  int next_ = 0;
};

// " window 4 masked [0 < %5, 1]": a windowed row's vector width, and the axes a load or store
// checks, against a value or its view's extent.
std::string masked(const Inst& i, const Names& value) {
  std::vector<std::string> axes;
  for (size_t d = 0; d < i.masked.size(); ++d)
    if (i.masked[d]) {
      std::string axis = std::to_string(d);
      if (d < i.limits.size() && i.limits[d] >= 0) axis += fmt::format(" < {}", value(i.limits[d]));
      axes.push_back(axis);
    }
  const std::string window = i.window > 0 ? fmt::format(" window {}", i.window) : "";
  return axes.empty() ? window : fmt::format("{} masked [{}]", window, fmt::join(axes, ", "));
}

// Compute and Reduce print the graph op's name (reduce_sum, add, gelu, …).
std::string mnemonic(const Inst& i) {
  if (i.opcode == Opcode::Compute || i.opcode == Opcode::Reduce) return op_info(i.op).name;
  return opcode_name(i.opcode);
}

void print_region(const Program& p, const Names& value, const Region& r, int depth, std::string* out) {
  const auto& values = value;
  const std::string pad(2 * static_cast<size_t>(depth), ' ');
  auto type_of = [&](int v) { return type_str(p.types.at(static_cast<size_t>(v))); };
  for (const Inst& i : r.body) {
    std::string lhs = i.results.empty() ? "" : values(i.results) + " = ";
    switch (i.opcode) {
      case Opcode::ProgramId:
        *out += fmt::format("{}{}program_id {} : index\n", pad, lhs, i.axis);
        break;
      case Opcode::Const:
        *out += fmt::format("{}{}const {} : {}\n", pad, lhs, number(i.value), type_of(i.results[0]));
        break;
      case Opcode::Load: {
        *out += fmt::format("{}{}load %arg{}[{}]{} : {}\n", pad, lhs, i.param, values(i.args), masked(i, value),
                            type_of(i.results[0]));
        break;
      }
      case Opcode::Store: {
        std::vector<int> offsets(i.args.begin(), i.args.end() - 1);
        *out +=
            fmt::format("{}{} %arg{}[{}], {}{} : {}\n", pad, i.reduce_add ? "store_add" : "store", i.param,
                        values(offsets), value(i.args.back()), masked(i, value), type_of(i.args.back()));
        break;
      }
      case Opcode::CopyAsync: {
        std::vector<int> offsets(i.args.begin(), i.args.end() - 1);
        *out += fmt::format("{}copy_async %arg{}[{}]{} into @{}[{}]\n", pad, i.param, values(offsets), masked(i, value),
                            p.shared.at(static_cast<size_t>(i.ring)).name, value(i.args.back()));
        break;
      }
      case Opcode::LoadShared:
        *out +=
            fmt::format("{}{}load @{}[{}]{} : {}\n", pad, lhs, p.shared.at(static_cast<size_t>(i.ring)).name,
                        values(i.args), i.transposed ? " transposed" : "", type_of(i.results[0]));
        break;
      case Opcode::StoreShared:
        *out += fmt::format("{}store @{}[{}]{}, {} : {}\n", pad,
                            p.shared.at(static_cast<size_t>(i.ring)).name, value(i.args[0]),
                            i.transposed ? " transposed" : "", value(i.args[1]), type_of(i.args[1]));
        break;
      case Opcode::DotAsync: {
        const std::string a = i.ring >= 0
                                  ? fmt::format("@{}[{}]{}", p.shared.at(static_cast<size_t>(i.ring)).name,
                                                value(i.args[0]), i.a_transposed ? " transposed" : "")
                                  : values(std::vector<int>(i.args.begin() + 2, i.args.end()));
        *out +=
            fmt::format("{}{}dot_async {}, @{}[{}]{}{}, {} : {}\n", pad, lhs, a,
                        p.shared.at(static_cast<size_t>(i.ring_b)).name, value(i.args[0]),
                        i.transposed ? " transposed" : "", i.b_col ? fmt::format(" cols {}", i.b_col) : "",
                        value(i.args[1]), type_of(i.results[0]));
        break;
      }
      case Opcode::DotWait: {
        std::vector<std::string> types;
        for (int v : i.results) types.push_back(type_of(v));
        *out += fmt::format("{}{}dot_wait {} pending {}{} : {}\n", pad, lhs, values(i.args), number(i.value),
                            i.pinned ? " pinned" : "", fmt::join(types, ", "));
        break;
      }
      case Opcode::AwaitTurn:
      case Opcode::HandOff:
        if (i.args.empty()) {
          *out += fmt::format("{}{}\n", pad, opcode_name(i.opcode));
        } else {
          *out += fmt::format("{}{} step {}{}\n", pad, opcode_name(i.opcode), value(i.args[0]),
                              i.args.size() > 1 ? " of " + value(i.args[1]) : "");
        }
        break;
      case Opcode::CommitGroup:
      case Opcode::Barrier:
      case Opcode::FenceAsync:
      case Opcode::WaitStores:
        *out += fmt::format("{}{}\n", pad, opcode_name(i.opcode));
        break;
      case Opcode::Specialize:
        *out += fmt::format("{}specialize producer {{\n", pad);
        print_region(p, value, i.regions.at(0), depth + 1, out);
        *out += fmt::format("{}}} consumers {} {{\n", pad, value(i.regions.at(1).args.at(0)));
        print_region(p, value, i.regions.at(1), depth + 1, out);
        *out += pad + "}\n";
        break;
      case Opcode::TmaLoad:
        *out += fmt::format("{}tma_load %arg{}[{}] into @{}[{}]{}\n", pad, i.param,
                            values(std::vector<int>(i.args.begin(), i.args.end() - 1)),
                            p.shared.at(static_cast<size_t>(i.ring)).name, value(i.args.back()),
                            i.multicast ? " multicast" : "");
        break;
      case Opcode::WaitFull:
      case Opcode::WaitEmpty:
        *out += fmt::format("{}{} @{}[{}] parity {}\n", pad, opcode_name(i.opcode),
                            p.shared.at(static_cast<size_t>(i.ring)).name, value(i.args.at(0)), value(i.args.at(1)));
        break;
      case Opcode::Release:
        *out += fmt::format("{}release @{}[{}]\n", pad, p.shared.at(static_cast<size_t>(i.ring)).name,
                            value(i.args.at(0)));
        break;
      case Opcode::TmaStore:
        *out += fmt::format("{}{} %arg{}[{}], {} via @{}{} : {}", pad,
                            i.reduce_add ? "tma_store_add" : "tma_store", i.param,
                            values(std::vector<int>(i.args.begin(), i.args.end() - 1)), value(i.args.back()),
                            p.shared.at(static_cast<size_t>(i.ring)).name,
                            i.by_warpgroup ? " by warpgroup" : "", type_of(i.args.back()));
        if (i.regions.empty()) {
          *out += "\n";
          break;
        }
        {
          const Region& r = i.regions.at(0);
          *out += fmt::format(" epilogue({} : {}, {}, {}) {{\n", value(r.args.at(0)), type_of(r.args.at(0)),
                              value(r.args.at(1)), value(r.args.at(2)));
          print_region(p, value, r, depth + 1, out);
          *out += pad + "}\n";
        }
        break;
      case Opcode::WaitGroup:
        *out += fmt::format("{}wait_group {}\n", pad, number(i.value));
        break;
      case Opcode::Iota:
        if (i.args.size() == 2) {
          *out += fmt::format("{}{}{} {} stride {} div {} mod {}{} : {}\n", pad, lhs, mnemonic(i), values(i.args),
                              i.iota_stride, i.iota_div, i.iota_mod,
                              i.window > 0 ? fmt::format(" window {}", i.window) : "", type_of(i.results[0]));
          break;
        }
        [[fallthrough]];
      case Opcode::Reduce:
        *out += fmt::format("{}{}{} {} axis {}{} : {}\n", pad, lhs, mnemonic(i), value(i.args[0]), i.axis,
                            i.args.size() > 1 ? " where " + value(i.args[1]) : "", type_of(i.results[0]));
        break;
      case Opcode::InBounds:
        *out += fmt::format("{}{}{} {} axis {} : {}\n", pad, lhs, mnemonic(i), values(i.args), i.axis,
                            type_of(i.results[0]));
        break;
      case Opcode::InWindow:
        *out += fmt::format("{}{}{} {} vec {} : {}\n", pad, lhs, mnemonic(i), values(i.args), i.window,
                            type_of(i.results[0]));
        break;
      case Opcode::ClusterValues:
      case Opcode::GatherWarps:
      case Opcode::GatherBlocks: {
        std::vector<std::string> types;
        for (int v : i.args) types.push_back(type_of(v));
        *out += fmt::format("{}{}{} {} : {}\n", pad, lhs, mnemonic(i), values(i.args), fmt::join(types, ", "));
        break;
      }
      case Opcode::LastArrival:
        *out += fmt::format("{}{}last_arrival %arg{}[{}] of {} : bool\n", pad, lhs, i.param, value(i.args[0]),
                            value(i.args[1]));
        break;
      case Opcode::ResetCount:
        *out += fmt::format("{}reset_count %arg{}[{}]\n", pad, i.param, value(i.args[0]));
        break;
      case Opcode::If:
        *out += fmt::format("{}if {} {{\n", pad, value(i.args[0]));
        print_region(p, value, i.regions.at(0), depth + 1, out);
        *out += pad + "}\n";
        break;
      case Opcode::For: {
        std::vector<std::string> carried, types;
        const Region& body = i.regions.at(0);
        for (size_t k = 3; k < i.args.size(); ++k)
          carried.push_back(fmt::format("{} = {}", value(body.args.at(k - 2)), value(i.args[k])));
        for (int v : i.results) types.push_back(type_of(v));
        *out += fmt::format("{}{}for {} = {} to {} step {}", pad, lhs, value(body.args.at(0)), value(i.args[0]),
                            value(i.args[1]), value(i.args[2]));
        if (!carried.empty())
          *out += fmt::format(" iter_args({}) : {}", fmt::join(carried, ", "), fmt::join(types, ", "));
        *out += " {\n";
        print_region(p, value, body, depth + 1, out);
        *out += pad + "}\n";
        break;
      }
      case Opcode::While: {
        std::vector<std::string> carried, types;
        const Region& head = i.regions.at(0);
        for (size_t k = 0; k < i.args.size(); ++k)
          carried.push_back(fmt::format("{} = {}", value(head.args.at(k)), value(i.args[k])));
        for (int v : i.results) types.push_back(type_of(v));
        *out += fmt::format("{}{}while ({}) : {} {{\n", pad, lhs, fmt::join(carried, ", "), fmt::join(types, ", "));
        print_region(p, value, head, depth + 1, out);
        *out += pad + "} do {\n";
        print_region(p, value, i.regions.at(1), depth + 1, out);
        *out += pad + "}\n";
        break;
      }
      case Opcode::NumPrograms:
        *out += fmt::format("{}{}num_programs {} : index\n", pad, lhs, i.axis);
        break;
      case Opcode::FillStage:
        *out += fmt::format("{}fill_stage %arg{}[{}] into @{}[{}] rows {}\n", pad, i.param,
                            values(std::vector<int>(i.args.begin(), i.args.begin() + 2)),
                            p.shared.at(static_cast<size_t>(i.ring)).name, value(i.args[2]), value(i.args[3]));
        break;
      case Opcode::StageRow:
        *out += fmt::format("{}{}stage_row @{}[{}] : index\n", pad, lhs, p.shared.at(static_cast<size_t>(i.ring)).name,
                            value(i.args[0]));
        break;
      case Opcode::Claim:
        *out += fmt::format("{}{}claim %arg{}[{}] after {}{} : ticket\n", pad, lhs, i.param, value(i.args[0]),
                            value(i.args[1]),
                            i.args.size() > 2 ? fmt::format(" next {} below {}", value(i.args[3]), value(i.args[2])) : "");
        break;
      case Opcode::Publish:
        *out += fmt::format("{}publish %arg{}[{}], {}\n", pad, i.param, value(i.args[0]),
                            values(std::vector<int>(i.args.begin() + 1, i.args.end())));
        break;
      case Opcode::GatherParts: {
        std::vector<std::string> types;
        for (int v : i.results) types.push_back(type_of(v));
        const PartsGather g = parts_gather(p, i);
        std::string extra;
        if (g.from >= 0) extra += " from " + value(g.from);
        if (g.when >= 0) extra += " if " + value(g.when);
        if (!g.warps.empty()) extra += " warps " + values(g.warps);
        *out += fmt::format("{}{}gather_parts %arg{}[{}] parts {}{} : {}\n", pad, lhs, i.param, value(i.args[0]),
                            number(i.value), extra, fmt::join(types, ", "));
        break;
      }
      case Opcode::FetchParts:
        *out += fmt::format("{}{}fetch_parts %arg{}[{}] parts {} : {}\n", pad, lhs, i.param, value(i.args[0]),
                            number(i.value), type_of(i.results[0]));
        break;
      case Opcode::Yield:
        *out += fmt::format("{}yield {}\n", pad, values(i.args));
        break;
      case Opcode::Convert:
        *out += fmt::format("{}{}convert {} chunk {} : {}\n", pad, lhs, values(i.args), number(i.value),
                            type_of(i.results[0]));
        break;
      case Opcode::IndexMul:
      case Opcode::IndexAdd:
      case Opcode::IndexDiv:
      case Opcode::IndexRem:
      case Opcode::IndexMin:
      case Opcode::IndexSub:
      case Opcode::IndexLess:
      case Opcode::IndexCeil:
      case Opcode::Splat:
      case Opcode::Spread:
      case Opcode::Dot:
      case Opcode::Compute:
        *out += fmt::format("{}{}{} {}{} : {}\n", pad, lhs, mnemonic(i), values(i.args),
                            i.nonpositive_arg   ? " nonpositive"
                            : i.flush_subnormal ? " ftz"
                            : i.absolute_error  ? " abs"
                            : i.skip_ones       ? " lazy"
                                                : "",
                            type_of(i.results[0]));
        break;
    }
  }
}

// ---- parsing ----

struct Token {
  enum Kind { Word, Value, Symbol, String, Punct, End } kind;
  std::string text;
  int line;
};

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> out;
  int line = 1;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '"') {
      size_t j = s.find('"', i + 1);
      if (j == std::string::npos) throw Error(fmt::format("tile IR line {}: unterminated string", line));
      out.push_back({Token::String, s.substr(i + 1, j - i - 1), line});
      i = j + 1;
    } else if (c == '%' || c == '@') {
      size_t j = i + 1;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({c == '%' ? Token::Value : Token::Symbol, s.substr(i + 1, j - i - 1), line});
      i = j;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_' || s[j] == '.' ||
                              s[j] == '-' || s[j] == '+'))
        ++j;
      out.push_back({Token::Word, s.substr(i, j - i), line});
      i = j;
    } else {
      out.push_back({Token::Punct, std::string(1, c), line});
      ++i;
    }
  }
  out.push_back({Token::End, "", line});
  return out;
}

class Parser {
 public:
  explicit Parser(const std::string& text) : t_(tokenize(text)) {}

  Program program() {
    Program p;
    word("tile.func");
    p.name = expect(Token::Symbol, "@name").text;
    punct("(");
    while (!at_punct(")")) {
      if (!p.params.empty()) punct(",");
      p.params.push_back(param(static_cast<int>(p.params.size())));
    }
    punct(")");
    word("grid");
    p.grid = int_list();
    word("threads");
    const int threads = static_cast<int>(integer());
    word("layout");
    p.layout = layout();
    if (take_word("mma")) {
      MmaConfig m;
      word("warps");
      std::vector<int> warps = small_list();
      word("warp_tile");
      std::vector<int> tile = small_list();
      if (warps.size() != 2 || tile.size() != 2) fail("mma needs two warps and two tile extents");
      m.warps_m = warps[0];
      m.warps_n = warps[1];
      m.warp_m = tile[0];
      m.warp_n = tile[1];
      p.mma = m;
    }
    if (take_word("shared")) {
      punct("[");
      while (!at_punct("]")) {
        if (!p.shared.empty()) punct(",");
        SharedRing r;
        r.name = expect(Token::Symbol, "@ring").text;
        punct(":");
        r.dtype = dtype_named(expect(Token::Word, "a dtype").text);
        std::vector<int64_t> dims = int_list();
        if (dims.size() != 3) fail("a shared ring needs [stages, rows, cols]");
        r.stages = static_cast<int>(dims[0]);
        r.tile = {dims[1], dims[2]};
        r.col_major = take_word("col_major");
        r.wgmma = take_word("wgmma");
        r.tma = take_word("tma");
        r.staging = take_word("staging");
        r.bulk = take_word("bulk");
        p.shared.push_back(r);
      }
      punct("]");
    }
    if (take_word("min_blocks_per_sm")) {
      p.min_blocks_per_sm = static_cast<int>(integer());
    }
    p.wide_indices = take_word("wide_indices");
    if (take_word("cluster")) {  // (a specialized program's follows its registers)
      p.cluster_blocks = static_cast<int>(integer());
    }
    if (take_word("registers")) {
      word("producer");
      p.producer_registers = static_cast<int>(integer());
      word("consumers");
      p.consumer_registers = static_cast<int>(integer());
      if (take_word("groups")) {
        p.consumer_groups = static_cast<int>(integer());
      }
      if (take_word("cluster")) {
        p.cluster_blocks = static_cast<int>(integer());
      }
    }
    if (p.layout.block_threads() != threads)
      fail(fmt::format("the layout has {} threads, the function {}", p.layout.block_threads(), threads));
    punct("{");
    region(p, p.body);
    punct("}");
    expect(Token::End, "the end of the text");
    return p;
  }

 private:
  const Token& peek() const { return t_[pos_]; }
  const Token& next() { return t_[pos_++]; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("tile IR line {}: {} (at '{}')", peek().line, what, peek().text));
  }
  const Token& expect(Token::Kind k, const char* what) {
    if (peek().kind != k) fail(fmt::format("expected {}", what));
    return next();
  }
  bool at_punct(const char* p) const { return peek().kind == Token::Punct && peek().text == p; }
  bool at_word(const char* w) const { return peek().kind == Token::Word && peek().text == w; }
  // Whether the next token is word w, taking it if so.
  bool take_word(const char* w) {
    if (!at_word(w)) return false;
    next();
    return true;
  }
  void punct(const char* p) {
    if (!at_punct(p)) fail(fmt::format("expected '{}'", p));
    next();
  }
  void word(const char* w) {
    if (!at_word(w)) fail(fmt::format("expected '{}'", w));
    next();
  }
  int64_t integer() {
    const Token& t = expect(Token::Word, "an integer");
    try {
      size_t used = 0;
      long long v = std::stoll(t.text, &used);
      if (used == t.text.size()) return v;
    } catch (const std::exception&) {
    }
    --pos_;
    fail("expected an integer");
  }
  double real() {
    const Token& t = expect(Token::Word, "a number");
    if (t.text == "inf") return INFINITY;
    if (t.text == "-inf") return -INFINITY;
    if (t.text == "nan") return NAN;
    try {
      size_t used = 0;
      double v = std::stod(t.text, &used);
      if (used == t.text.size()) return v;
    } catch (const std::exception&) {
    }
    --pos_;
    fail("expected a number");
  }
  std::vector<int64_t> int_list() {
    std::vector<int64_t> out;
    punct("[");
    while (!at_punct("]")) {
      if (!out.empty()) punct(",");
      out.push_back(integer());
    }
    punct("]");
    return out;
  }
  std::vector<int> small_list() {
    std::vector<int> out;
    for (int64_t v : int_list()) out.push_back(static_cast<int>(v));
    return out;
  }
  DType dtype_named(const std::string& s) {
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Bool})
      if (s == dtype_name(t)) return t;
    fail(fmt::format("unknown dtype '{}'", s));
  }
  Layout layout() {
    word("blocked");
    punct("<");
    Layout l;
    word("per_thread");
    l.per_thread = small_list();
    punct(",");
    word("threads");
    l.threads = small_list();
    punct(",");
    word("reps");
    l.reps = small_list();
    punct(">");
    if (l.per_thread.size() != l.threads.size() || l.threads.size() != l.reps.size())
      fail("the layout's lists have different lengths");
    return l;
  }
  Param param(int index) {
    Param p;
    const Token& id = expect(Token::Value, "%argN");
    if (id.text != fmt::format("arg{}", index)) fail(fmt::format("expected %arg{}", index));
    p.name = expect(Token::String, "the parameter's name in quotes").text;
    punct(":");
    p.dtype = dtype_named(expect(Token::Word, "a dtype").text);
    p.view = int_list();
    if (take_word("rows")) {
      p.row_dims = int_list();
      word("as");
      p.row_view = int_list();
    }
    if (take_word("col_major")) {
      p.col_major = true;
      p.group_rows = integer();
    }
    if (take_word("elements")) {
      p.elem_dims = int_list();
      word("as");
      p.elem_view = int_list();
    }
    if (take_word("tma_rows")) {
      p.tma_rows = integer();
    }
    p.output = take_word("out");
    p.workspace = take_word("workspace");
    return p;
  }
  // `%argW[%row] parts P` of gather_parts and fetch_parts.
  void parts_of_row(const Program& p, Inst& i) {
    i.param = param_ref(p);
    punct("[");
    i.args = {use("a row")};
    punct("]");
    word("parts");
    i.value = static_cast<double>(integer());
  }
  Type type() {
    if (take_word("index")) {
      return Type::index();
    }
    if (take_word("ticket")) {
      return Type::ticket();
    }
    if (take_word("words")) {
      punct("<");
      const std::string spec = expect(Token::Word, "a part count and a value count").text;
      const size_t x = spec.find('x');
      int64_t parts = 0, values = 0;
      try {
        if (x == std::string::npos) throw std::invalid_argument(spec);
        parts = std::stoll(spec.substr(0, x));
        values = std::stoll(spec.substr(x + 1));
      } catch (const std::exception&) {
        fail(fmt::format("bad words extents '{}'", spec));
      }
      punct(">");
      return Type::words(parts, values);
    }
    const Token& w = expect(Token::Word, "a type");
    if (w.text != "tile") return Type::scalar(dtype_named(w.text));
    punct("<");
    // 2x1024xf32 is one word: extents, then the dtype.
    std::string spec = expect(Token::Word, "a tile's extents and dtype").text;
    Shape shape;
    size_t start = 0;
    for (size_t x = spec.find('x'); x != std::string::npos; x = spec.find('x', start)) {
      try {
        shape.push_back(std::stoll(spec.substr(start, x - start)));
      } catch (const std::exception&) {
        fail(fmt::format("bad tile extents '{}'", spec));
      }
      start = x + 1;
    }
    DType dt = dtype_named(spec.substr(start));
    Space space = Space::Reg;
    Frag frag = Frag::None;
    while (at_punct(",")) {
      next();
      const std::string w = expect(Token::Word, "smem or a fragment layout").text;
      if (w == "smem")
        space = Space::Shared;
      else if (w == frag_name(Frag::A))
        frag = Frag::A;
      else if (w == frag_name(Frag::B))
        frag = Frag::B;
      else if (w == frag_name(Frag::Acc))
        frag = Frag::Acc;
      else if (w == frag_name(Frag::Lanes))
        frag = Frag::Lanes;
      else if (w == frag_name(Frag::Warps))
        frag = Frag::Warps;
      else if (w == frag_name(Frag::WarpLanes))
        frag = Frag::WarpLanes;
      else
        fail(fmt::format("unknown tile attribute '{}'", w));
    }
    punct(">");
    if (shape.empty()) fail("a tile needs extents");
    return Type::tile(dt, shape, space, frag);
  }
  // %argN: a parameter of the program.
  int param_ref(const Program& p) {
    const Token& a = expect(Token::Value, "%argN");
    if (a.text.rfind("arg", 0) != 0) fail("expected a parameter %argN");
    const int param = std::stoi(a.text.substr(3));
    if (param < 0 || param >= static_cast<int>(p.params.size())) fail("no such parameter");
    return param;
  }
  // @name: a shared ring of the program.
  int ring(const Program& p) {
    const std::string name = expect(Token::Symbol, "@ring").text;
    for (size_t r = 0; r < p.shared.size(); ++r)
      if (p.shared[r].name == name) return static_cast<int>(r);
    --pos_;
    fail(fmt::format("no shared ring @{}", name));
  }
  // " masked [0 < %5, 1]" after a load's, store's or copy's offsets.
  void masks(Inst& i, size_t rank) {
    if (take_word("window")) i.window = static_cast<int>(integer());
    if (!at_word("masked")) return;
    next();
    i.masked.assign(rank, false);
    i.limits.assign(rank, -1);
    punct("[");
    while (!at_punct("]")) {
      if (at_punct(",")) next();
      const int64_t d = integer();
      if (d < 0 || d >= static_cast<int64_t>(rank)) fail("a masked axis out of range");
      i.masked[static_cast<size_t>(d)] = true;
      if (at_punct("<")) {
        next();
        i.limits[static_cast<size_t>(d)] = use("a limit");
      }
    }
    punct("]");
  }
  // A use of a value defined earlier (in this region or an enclosing one).
  int use(const char* what) {
    const Token& v = expect(Token::Value, what);
    auto it = names_.find(v.text);
    if (it == names_.end()) {
      --pos_;
      fail(fmt::format("%{} is used before it is defined", v.text));
    }
    return it->second;
  }
  // `%argN[offsets…]`: the instruction's parameter and its offsets (its first args).
  // "(%a = %init, …) : types": a loop's carried values, their initial values appended to the
  // loop's args.
  std::vector<Type> carried_values(Inst& i, std::vector<std::string>* names) {
    punct("(");
    while (!at_punct(")")) {
      if (!names->empty()) punct(",");
      names->push_back(expect(Token::Value, "a carried value").text);
      punct("=");
      i.args.push_back(use("an initial value"));
    }
    punct(")");
    punct(":");
    std::vector<Type> types;
    while (types.size() < names->size()) {
      if (!types.empty()) punct(",");
      types.push_back(type());
    }
    return types;
  }
  // " into @ring[%stage]" after a copy's parameter and offsets: the ring, the stage appended.
  void into_stage(const Program& p, Inst& i) {
    word("into");
    i.ring = ring(p);
    punct("[");
    i.args.push_back(use("the stage"));
    punct("]");
  }
  void param_at(const Program& p, Inst& i) {
    i.param = param_ref(p);
    punct("[");
    i.args = uses_until_colon();
    punct("]");
  }
  std::vector<int> uses_until_colon() {
    std::vector<int> out;
    while (!at_punct(":") && !at_punct("]") && !at_word("nonpositive") && !at_word("ftz") &&
           !at_word("abs") && !at_word("lazy")) {
      if (!out.empty()) punct(",");
      out.push_back(use("a value"));
    }
    return out;
  }
  int define(Program& p, const std::string& name, const Type& t) {
    if (names_.count(name)) fail(fmt::format("%{} is defined twice", name));
    int id = p.add_value(t);
    names_[name] = id;
    return id;
  }
  void region(Program& p, Region& r) {
    while (!at_punct("}")) r.body.push_back(inst(p));
  }
  // `{ … }`: a region whose values are not visible after it.
  Region braced_region(Program& p) {
    Region r;
    std::map<std::string, int> outer = names_;
    punct("{");
    region(p, r);
    punct("}");
    names_ = outer;
    return r;
  }
  Inst inst(Program& p) {
    std::vector<std::string> defs;
    while (peek().kind == Token::Value) {
      defs.push_back(next().text);
      if (at_punct(",")) next();
    }
    if (!defs.empty()) punct("=");
    const Token& m = expect(Token::Word, "an instruction");
    Inst i;
    const std::string op = m.text;
    auto results = [&](const std::vector<Type>& types) {
      if (types.size() != defs.size())
        fail(fmt::format("{} values defined, {} types given", defs.size(), types.size()));
      for (size_t k = 0; k < defs.size(); ++k) i.results.push_back(define(p, defs[k], types[k]));
    };
    if (op == "program_id") {
      i.opcode = Opcode::ProgramId;
      i.axis = static_cast<int>(integer());
      punct(":");
      results({type()});
    } else if (op == "const") {
      i.opcode = Opcode::Const;
      i.value = real();
      punct(":");
      results({type()});
    } else if (op == "muli" || op == "addi" || op == "divui" || op == "remui" || op == "minui" || op == "subi" ||
               op == "ceili" || op == "ltui") {
      static const std::map<std::string, Opcode> ops = {{"muli", Opcode::IndexMul}, {"addi", Opcode::IndexAdd},
                                                        {"divui", Opcode::IndexDiv}, {"remui", Opcode::IndexRem},
                                                        {"minui", Opcode::IndexMin}, {"subi", Opcode::IndexSub},
                                                        {"ceili", Opcode::IndexCeil}, {"ltui", Opcode::IndexLess}};
      i.opcode = ops.at(op);
      i.args = uses_until_colon();
      punct(":");
      results({type()});
    } else if (op == "load" && peek().kind == Token::Symbol) {
      i.opcode = Opcode::LoadShared;
      i.ring = ring(p);
      punct("[");
      i.args = uses_until_colon();
      punct("]");
      i.transposed = take_word("transposed");
      punct(":");
      results({type()});
    } else if (op == "copy_async") {
      i.opcode = Opcode::CopyAsync;
      param_at(p, i);
      masks(i, i.args.size());
      into_stage(p, i);
    } else if (op == "specialize") {
      i.opcode = Opcode::Specialize;
      word("producer");
      i.regions.push_back(braced_region(p));
      word("consumers");
      std::map<std::string, int> outer = names_;
      const int group = define(p, expect(Token::Value, "the consumers' group").text, Type::index());
      i.regions.push_back(braced_region(p));
      i.regions.back().args = {group};
      names_ = outer;
    } else if (op == "tma_load") {
      i.opcode = Opcode::TmaLoad;
      param_at(p, i);
      into_stage(p, i);
      i.multicast = take_word("multicast");
    } else if (op == "wait_full" || op == "wait_empty" || op == "release") {
      i.opcode = op == "wait_full" ? Opcode::WaitFull : op == "wait_empty" ? Opcode::WaitEmpty : Opcode::Release;
      i.ring = ring(p);
      punct("[");
      i.args = {use("the stage")};
      punct("]");
      if (i.opcode != Opcode::Release) {
        word("parity");
        i.args.push_back(use("the parity"));
      }
    } else if (op == "tma_store" || op == "tma_store_add") {
      i.opcode = Opcode::TmaStore;
      i.reduce_add = op == "tma_store_add";
      param_at(p, i);
      punct(",");
      i.args.push_back(use("the tile"));
      word("via");
      i.ring = ring(p);
      if (take_word("by")) {
        word("warpgroup");
        i.by_warpgroup = true;
      }
      punct(":");
      type();
      if (take_word("epilogue")) {  // a region run per staged chunk
        Region r;
        std::map<std::string, int> outer = names_;
        punct("(");
        const std::string staged = expect(Token::Value, "the staged chunk").text;
        punct(":");
        const Type t = type();
        punct(",");
        const std::string row = expect(Token::Value, "the chunk's row").text;
        punct(",");
        const std::string col = expect(Token::Value, "the chunk's column").text;
        punct(")");
        r.args = {define(p, staged, t), define(p, row, Type::index()), define(p, col, Type::index())};
        punct("{");
        region(p, r);
        punct("}");
        names_ = outer;
        i.regions.push_back(std::move(r));
      }
    } else if (op == "await_turn" || op == "hand_off") {
      i.opcode = op == "await_turn" ? Opcode::AwaitTurn : Opcode::HandOff;
      if (take_word("step")) {  // turns between a group's warpgroups
        i.args.push_back(use("the step"));
        if (i.opcode == Opcode::HandOff) {
          word("of");
          i.args.push_back(use("the steps' count"));
        }
      }
    } else if (op == "wait_stores") {
      i.opcode = Opcode::WaitStores;
    } else if (op == "commit_group" || op == "barrier" || op == "fence_async") {
      i.opcode = op == "barrier" ? Opcode::Barrier : op == "fence_async" ? Opcode::FenceAsync : Opcode::CommitGroup;
    } else if (op == "dot_async") {
      i.opcode = Opcode::DotAsync;
      std::vector<int> fragments;  // A in registers
      int stage = -1;
      if (peek().kind == Token::Symbol) {
        i.ring = ring(p);
        punct("[");
        stage = use("the stage");
        punct("]");
        i.a_transposed = take_word("transposed");
        punct(",");
      } else {
        while (peek().kind != Token::Symbol) {
          fragments.push_back(use("an A fragment"));
          punct(",");
        }
      }
      i.ring_b = ring(p);
      punct("[");
      const int b_stage = use("the stage");
      if (stage >= 0 && b_stage != stage) fail("dot_async reads one stage of both rings");
      punct("]");
      i.transposed = take_word("transposed");
      if (take_word("cols")) i.b_col = integer();
      punct(",");
      i.args.push_back(b_stage);
      i.args.push_back(use("the accumulator"));
      i.args.insert(i.args.end(), fragments.begin(), fragments.end());
      punct(":");
      results({type()});
    } else if (op == "dot_wait") {
      i.opcode = Opcode::DotWait;
      while (!at_word("pending")) {
        if (!i.args.empty()) punct(",");
        i.args.push_back(use("an accumulator"));
      }
      word("pending");
      i.value = static_cast<double>(integer());
      i.pinned = take_word("pinned");
      punct(":");
      std::vector<Type> types;
      while (types.size() < i.args.size()) {
        if (!types.empty()) punct(",");
        types.push_back(type());
      }
      results(types);
    } else if (op == "gather_warps" || op == "gather_blocks" || op == "cluster_values") {
      // (The args' types: each result its arg's gathered over lanes, or each block's value of it.)
      i.opcode = op == "gather_warps" ? Opcode::GatherWarps : op == "gather_blocks" ? Opcode::GatherBlocks
                                                                                  : Opcode::ClusterValues;
      i.args = uses_until_colon();
      punct(":");
      const size_t blocks = static_cast<size_t>(std::max(p.cluster_blocks, 1));
      std::vector<Type> each;
      for (size_t a = 0; a < i.args.size(); ++a) {
        if (a > 0) punct(",");
        Type t = type();
        if (i.opcode == Opcode::ClusterValues) {
          each.insert(each.end(), blocks, t);
          continue;
        }
        t.frag = Frag::WarpLanes;
        if (i.opcode == Opcode::GatherBlocks && t.shape.size() == 2) t.shape[1] = static_cast<int64_t>(blocks);
        each.push_back(t);
      }
      results(each);
    } else if (op == "wait_group") {
      i.opcode = Opcode::WaitGroup;
      i.value = static_cast<double>(integer());
    } else if (op == "store" && peek().kind == Token::Symbol) {
      i.opcode = Opcode::StoreShared;
      i.ring = ring(p);
      punct("[");
      i.args.push_back(use("the stage"));
      punct("]");
      i.transposed = take_word("transposed");
      punct(",");
      i.args.push_back(use("the stored tile"));
      punct(":");
      type();
    } else if (op == "load" || op == "store" || op == "store_add") {
      i.opcode = op == "load" ? Opcode::Load : Opcode::Store;
      i.reduce_add = op == "store_add";
      param_at(p, i);
      const size_t rank = i.args.size();
      if (i.opcode == Opcode::Store) {
        punct(",");
        i.args.push_back(use("the stored tile"));
      }
      masks(i, rank);
      punct(":");
      Type t = type();
      if (i.opcode == Opcode::Load) results({t});
    } else if (op == "convert") {
      i.opcode = Opcode::Convert;
      i.args = {use("the converted accumulator")};
      word("chunk");
      i.value = static_cast<double>(integer());
      punct(":");
      results({type()});
    } else if (op == "dot") {
      i.opcode = Opcode::Dot;
      i.args = uses_until_colon();
      punct(":");
      results({type()});
    } else if (op == "splat" || op == "spread") {
      i.opcode = op == "splat" ? Opcode::Splat : Opcode::Spread;
      i.args = uses_until_colon();
      punct(":");
      results({type()});
    } else if (op == "for") {
      i.opcode = Opcode::For;
      Region r;
      const std::string iv = expect(Token::Value, "the induction variable").text;
      punct("=");
      i.args.push_back(use("the lower bound"));
      word("to");
      i.args.push_back(use("the upper bound"));
      word("step");
      i.args.push_back(use("the step"));
      std::vector<std::string> carried;
      std::vector<Type> types;
      if (take_word("iter_args")) types = carried_values(i, &carried);
      std::map<std::string, int> outer = names_;
      r.args.push_back(define(p, iv, Type::index()));
      for (size_t k = 0; k < carried.size(); ++k) r.args.push_back(define(p, carried[k], types[k]));
      punct("{");
      region(p, r);
      punct("}");
      names_ = outer;  // the region's values are not visible after it
      i.regions.push_back(std::move(r));
      results(types);
    } else if (op == "while") {
      i.opcode = Opcode::While;
      std::vector<std::string> carried;
      const std::vector<Type> types = carried_values(i, &carried);
      std::map<std::string, int> outer = names_;
      Region head, body;
      for (size_t k = 0; k < carried.size(); ++k) head.args.push_back(define(p, carried[k], types[k]));
      punct("{");
      region(p, head);
      punct("}");
      word("do");  // (the body sees the condition's values)
      punct("{");
      region(p, body);
      punct("}");
      names_ = outer;
      i.regions.push_back(std::move(head));
      i.regions.push_back(std::move(body));
      results(types);
    } else if (op == "num_programs") {
      i.opcode = Opcode::NumPrograms;
      i.axis = static_cast<int>(integer());
      punct(":");
      results({type()});
    } else if (op == "fill_stage") {
      i.opcode = Opcode::FillStage;
      param_at(p, i);
      into_stage(p, i);
      word("rows");
      i.args.push_back(use("the rows"));
    } else if (op == "stage_row") {
      i.opcode = Opcode::StageRow;
      i.ring = ring(p);
      punct("[");
      i.args = {use("the stage")};
      punct("]");
      punct(":");
      results({type()});
    } else if (op == "publish") {
      i.opcode = Opcode::Publish;
      i.param = param_ref(p);
      punct("[");
      i.args = {use("a task")};
      punct("]");
      while (at_punct(",")) {
        punct(",");
        i.args.push_back(use("a published value"));
      }
    } else if (op == "gather_parts") {
      i.opcode = Opcode::GatherParts;
      parts_of_row(p, i);
      if (take_word("from")) i.args.push_back(use("fetched words"));
      if (take_word("if")) i.args.push_back(use("a condition"));
      if (take_word("warps")) {
        i.args.push_back(use("a warps tile"));
        while (at_punct(",")) {
          punct(",");
          i.args.push_back(use("a warps tile"));
        }
      }
      punct(":");
      std::vector<Type> types = {type()};
      while (at_punct(",")) {
        punct(",");
        types.push_back(type());
      }
      results(types);
    } else if (op == "fetch_parts") {
      i.opcode = Opcode::FetchParts;
      parts_of_row(p, i);
      punct(":");
      results({type()});
    } else if (op == "claim") {
      i.opcode = Opcode::Claim;
      i.param = param_ref(p);
      punct("[");
      i.args = {use("a counter slot")};
      punct("]");
      word("after");
      i.args.push_back(use("the rows dealt"));
      if (take_word("next")) {
        const int ticket = use("the ticket");
        word("below");
        i.args.push_back(use("the rows"));
        i.args.push_back(ticket);
      }
      punct(":");
      results({type()});
    } else if (op == "in_bounds") {
      i.opcode = Opcode::InBounds;
      i.args = {use("an offset")};
      punct(",");
      i.args.push_back(use("a limit"));
      word("axis");
      i.axis = static_cast<int>(integer());
      punct(":");
      results({type()});
    } else if (op == "in_window") {
      i.opcode = Opcode::InWindow;
      i.args = {use("a row offset")};
      punct(",");
      i.args.push_back(use("a column offset"));
      punct(",");
      i.args.push_back(use("the rows' width"));
      word("vec");
      i.window = static_cast<int>(integer());
      punct(":");
      results({type()});
    } else if (op == "iota") {
      i.opcode = Opcode::Iota;
      i.args = {use("an offset")};
      if (at_punct(",")) {  // the linear form: row and column offsets
        punct(",");
        i.args.push_back(use("a column offset"));
        word("stride");
        i.iota_stride = integer();
        word("div");
        i.iota_div = integer();
        word("mod");
        i.iota_mod = integer();
        if (take_word("window")) i.window = static_cast<int>(integer());
      } else {
        word("axis");
        i.axis = static_cast<int>(integer());
      }
      punct(":");
      results({type()});
    } else if (op == "last_arrival" || op == "reset_count") {
      i.opcode = op == "last_arrival" ? Opcode::LastArrival : Opcode::ResetCount;
      const Token& a = expect(Token::Value, "%argN");
      if (a.text.rfind("arg", 0) != 0) fail("expected the workspace %argN");
      i.param = std::stoi(a.text.substr(3));
      punct("[");
      i.args = {use("a counter slot")};
      punct("]");
      if (i.opcode == Opcode::LastArrival) {
        word("of");
        i.args.push_back(use("the number of arrivals"));
        punct(":");
        results({type()});
      }
    } else if (op == "if") {
      i.opcode = Opcode::If;
      i.args = {use("a condition")};
      i.regions.push_back(braced_region(p));
    } else if (op == "yield") {
      i.opcode = Opcode::Yield;
      while (peek().kind == Token::Value) {
        i.args.push_back(use("a yielded value"));
        if (!at_punct(",")) break;
        next();
      }
    } else if (op.rfind("reduce_", 0) == 0) {
      i.opcode = Opcode::Reduce;
      i.op = graph_op(op);
      i.args = {use("the reduced tile")};
      word("axis");
      i.axis = static_cast<int>(integer());
      if (take_word("where")) i.args.push_back(use("a mask"));
      punct(":");
      results({type()});
    } else {
      i.opcode = Opcode::Compute;
      i.op = graph_op(op);
      i.args = uses_until_colon();
      i.nonpositive_arg = take_word("nonpositive");
      i.flush_subnormal = take_word("ftz");
      i.absolute_error = take_word("abs");
      i.skip_ones = take_word("lazy");
      punct(":");
      results({type()});
    }
    return i;
  }
  Op graph_op(const std::string& name) {
    for (int o = 0; o <= static_cast<int>(Op::MatMul); ++o)
      if (name == op_info(static_cast<Op>(o)).name) return static_cast<Op>(o);
    fail(fmt::format("unknown instruction '{}'", name));
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  std::map<std::string, int> names_;
};

}  // namespace

std::string print_program(const Program& p) {
  std::vector<std::string> params;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const Param& a = p.params[i];
    std::string rows = a.row_dims.empty() ? "" : fmt::format(" rows {} as {}", shape_str(a.row_dims), shape_str(a.row_view));
    std::string col_major = a.col_major ? fmt::format(" col_major {}", a.group_rows) : "";
    if (!a.elem_dims.empty()) col_major += fmt::format(" elements {} as {}", shape_str(a.elem_dims), shape_str(a.elem_view));
    if (a.tma_rows > 0) col_major += fmt::format(" tma_rows {}", a.tma_rows);
    params.push_back(fmt::format("%arg{} \"{}\": {}{}{}{}{}{}", i, a.name, dtype_name(a.dtype), shape_str(a.view), rows,
                                 col_major, a.output ? " out" : "", a.workspace ? " workspace" : ""));
  }
  std::string mma = p.mma ? fmt::format(" mma warps [{}, {}] warp_tile [{}, {}]", p.mma->warps_m, p.mma->warps_n,
                                        p.mma->warp_m, p.mma->warp_n)
                         : "";
  std::vector<std::string> rings;
  for (const SharedRing& r : p.shared)
    rings.push_back(fmt::format("@{}: {}[{}, {}, {}]{}", r.name, dtype_name(r.dtype), r.stages, r.tile.at(0),
                                r.tile.at(1),
                                std::string(r.col_major ? " col_major" : "") + (r.wgmma ? " wgmma" : "") + (r.tma ? " tma" : "") +
                                    (r.staging ? " staging" : "") + (r.bulk ? " bulk" : "")));
  if (!rings.empty()) mma += fmt::format("\n    shared [{}]", fmt::join(rings, ", "));
  std::string out = fmt::format("tile.func @{}({})\n    grid [{}] threads {} layout {}{}{}{}{}{} {{\n", p.name,
                                fmt::join(params, ", "), fmt::join(p.grid, ", "), p.block_threads(),
                                layout_str(p.layout), mma,
                                p.min_blocks_per_sm ? fmt::format(" min_blocks_per_sm {}", p.min_blocks_per_sm) : "",
                                p.wide_indices ? " wide_indices" : "",
                                !p.specialized() && p.cluster_blocks > 1 ? fmt::format(" cluster {}", p.cluster_blocks) : "",
                                p.specialized() ? fmt::format(" registers producer {} consumers {}{}", p.producer_registers,
                                                              p.consumer_registers,
                                                              (p.consumer_groups > 1
                                                                   ? fmt::format(" groups {}", p.consumer_groups)
                                                                   : "") +
                                                                  (p.cluster_blocks > 1
                                                                       ? fmt::format(" cluster {}", p.cluster_blocks)
                                                                       : ""))
                                                : "");
  print_region(p, Names(p), p.body, 1, &out);
  out += "}\n";
  return out;
}

Program parse_program(const std::string& text) { return Parser(text).program(); }

}  // namespace tilefuse::tir
