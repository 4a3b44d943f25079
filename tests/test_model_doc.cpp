// test_model_doc.cpp: docs/MODEL.md against the code. Every tensor make_param_table creates, for every
// method and every switch that adds or shapes parameters, matches exactly one row of the document's
// parameter tables (its name pattern; its shape where the shape column gives one), in the canonical
// order the document states; every name a row documents is created by some config; the keys the
// config writer puts in a config.json's `model` are exactly the keys of the document's config tables,
// and a file without the keys an older writer left out reads the same. The document is read from
// the path CMake passes (NORMLAB_MODEL_MD; the environment variable of that name overrides it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "model/config.h"
#include "model/hyper.h"
#include "model/methods.h"
#include "model/params.h"
#include "train/resume.h"
#include "train/run_config.h"

using namespace normlab;

namespace {

// docs/MODEL.md, or the file the environment's NORMLAB_MODEL_MD names (a draft to check)
std::vector<std::string> doc_lines() {
  const char* env = std::getenv("NORMLAB_MODEL_MD");
  const std::string path = env && *env ? env : NORMLAB_MODEL_MD;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The cells of a table row "| a | b \| c | d |" (an escaped bar stays in its cell, unescaped).
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 1; i < row.size(); i++) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cur += '|';
      i++;
    } else if (row[i] == '|') {
      const size_t a = cur.find_first_not_of(' '), b = cur.find_last_not_of(' ');
      out.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
      cur.clear();
    } else {
      cur += row[i];
    }
  }
  return out;
}

// The text between the first pair of backticks, or "".
std::string first_code(const std::string& s) {
  const size_t a = s.find('`');
  if (a == std::string::npos) return "";
  const size_t b = s.find('`', a + 1);
  return b == std::string::npos ? "" : s.substr(a + 1, b - a - 1);
}

// The rows of every table whose header is `header`, with the heading of the section ("## ...") each
// table is in.
struct TableRow {
  std::string section;
  std::vector<std::string> cells;
  int line = 0;
};
std::vector<TableRow> table_rows(const std::vector<std::string>& lines, const std::string& header) {
  std::vector<TableRow> rows;
  std::string section;
  for (size_t i = 0; i < lines.size(); i++) {
    if (lines[i].rfind("## ", 0) == 0) section = lines[i];
    if (lines[i] != header) continue;
    for (size_t j = i + 2; j < lines.size() && lines[j].rfind("|", 0) == 0; j++)
      rows.push_back({section, cells(lines[j]), int(j + 1)});
  }
  return rows;
}

// ---- name patterns: `h.{l}.{attn,mlp}.ln_in.{weight,bias}`, `enc.h.{l}.*` ----

struct Expansion {
  std::string text;  // the pattern with its alternatives chosen ("h.{l}.attn.ln_in.bias")
  std::regex re;     // {l} -> a layer number, a trailing * -> the rest (both captured)
  int last_alt = -1;  // which alternative of the pattern's last brace group, -1 without one
};

std::string regex_of(const std::string& text) {
  std::string re;
  for (size_t i = 0; i < text.size(); i++) {
    if (text.compare(i, 3, "{l}") == 0) {
      re += "([0-9]+)";
      i += 2;
    } else if (text[i] == '*') {
      re += "(.+)";
    } else if (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_') {
      re += text[i];
    } else {
      re += std::string("\\") + text[i];
    }
  }
  return re;
}

// Expands every brace group but {l}; *alternatives of the last group receives their count (0: none).
std::vector<Expansion> expand(const std::string& pattern, int* last_group_size) {
  std::vector<std::pair<std::string, int>> out = {{"", -1}};
  *last_group_size = 0;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '{' && pattern.compare(i, 3, "{l}") != 0) {
      const size_t close = pattern.find('}', i);
      EXPECT_NE(close, std::string::npos) << "unclosed brace in `" << pattern << "`";
      if (close == std::string::npos) return {};
      std::vector<std::string> alts;
      std::stringstream ss(pattern.substr(i + 1, close - i - 1));
      for (std::string a; std::getline(ss, a, ',');) alts.push_back(a);
      std::vector<std::pair<std::string, int>> next;
      for (const auto& [prefix, _] : out)
        for (size_t k = 0; k < alts.size(); k++) next.push_back({prefix + alts[k], int(k)});
      out = next;
      *last_group_size = int(alts.size());
      i = close + 1;
    } else {
      for (auto& [prefix, _] : out) prefix += pattern[i];
      i++;
    }
  }
  std::vector<Expansion> ex;
  for (const auto& [text, alt] : out) ex.push_back({text, std::regex(regex_of(text)), alt});
  return ex;
}

// ---- shapes: "(A + 2 W, C)", "(C), (C), (1), (1)" ----

using Symbols = std::map<std::string, long>;

// A sum of products of numbers and symbols ("A + 2 W", "2C", "seq_len"); nullopt (and the unknown
// name in *unknown) when a symbol has no value.
std::optional<long> eval(const std::string& expr, const Symbols& sym, std::string* unknown) {
  long sum = 0, product = 1;
  bool any = false;
  for (size_t i = 0; i <= expr.size(); i++) {
    const char c = i < expr.size() ? expr[i] : '+';
    if (c == ' ') continue;
    if (c == '+') {
      if (!any) return std::nullopt;
      sum += product;
      product = 1;
      any = false;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < expr.size() && std::isdigit(static_cast<unsigned char>(expr[j]))) j++;
      product *= std::stol(expr.substr(i, j - i));
      any = true;
      i = j - 1;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[j])) || expr[j] == '_')) j++;
      const std::string name = expr.substr(i, j - i);
      const auto it = sym.find(name);
      if (it == sym.end()) {
        *unknown = name;
        return std::nullopt;
      }
      product *= it->second;
      any = true;
      i = j - 1;
    } else {
      *unknown = std::string(1, c);
      return std::nullopt;
    }
  }
  return sum;
}

// The leading parenthesized tuples of a shape cell, each a list of expressions; empty when the cell
// does not start with one (its shape is prose: "as `k_norm`", "skipinit: (1); ...").
std::vector<std::vector<std::string>> shape_tuples(const std::string& cell) {
  std::vector<std::vector<std::string>> tuples;
  size_t i = 0;
  while (i < cell.size() && cell[i] == '(') {
    const size_t close = cell.find(')', i);
    if (close == std::string::npos) break;
    std::vector<std::string> dims;
    std::stringstream ss(cell.substr(i + 1, close - i - 1));
    for (std::string d; std::getline(ss, d, ',');) dims.push_back(d);
    tuples.push_back(dims);
    i = close + 1;
    if (cell.compare(i, 3, ", (") == 0) i += 2;
    else break;
  }
  return tuples;
}

// ---- the parameter tables ----

struct ParamRow {
  std::string pattern, shape_cell, section;
  int line = 0;
  std::vector<Expansion> ex;
  int last_group_size = 0;
  std::vector<std::vector<std::string>> tuples;
  std::string alias;  // an alias row (`enc.h.{l}.*` | as `h.{l}.*`): the pattern it stands for
  int phase = 1;      // 0: before the layers, 1: in a layer (or between the stacks), 2: after them
  int layer_slot = 0;  // a layer's own tensor (`h.{l}.rezero`): -1 when its row precedes the table's
                       // sub-layer rows (stored before the sub-layers), 3 when it follows them
};

std::vector<ParamRow> param_rows(const std::vector<std::string>& lines) {
  std::vector<ParamRow> rows;
  for (const TableRow& t : table_rows(lines, "| name | shape | present |")) {
    if (t.section.find("## Parameters") != 0 && t.section.find("## Encoder") != 0) continue;
    EXPECT_EQ(t.cells.size(), 3u) << "MODEL.md line " << t.line;
    if (t.cells.size() != 3) continue;
    ParamRow r;
    r.pattern = first_code(t.cells[0]);
    r.shape_cell = t.cells[1];
    r.section = t.section;
    r.line = t.line;
    EXPECT_FALSE(r.pattern.empty()) << "MODEL.md line " << t.line << ": no `name` in the first cell";
    r.ex = expand(r.pattern, &r.last_group_size);
    if (r.pattern.back() == '*') {
      r.alias = first_code(r.shape_cell);
      EXPECT_TRUE(r.shape_cell.rfind("as `", 0) == 0 && !r.alias.empty() && r.alias.back() == '*')
          << "MODEL.md line " << t.line << ": a row ending in * names what it stands for (\"as `h.{l}.*`\")";
    } else {
      r.tuples = shape_tuples(r.shape_cell);
      EXPECT_TRUE(r.tuples.size() <= 1 || int(r.tuples.size()) == r.last_group_size)
          << "MODEL.md line " << t.line << ": " << r.tuples.size() << " shapes for a last brace group of "
          << r.last_group_size;
    }
    rows.push_back(std::move(r));
  }
  // the phases: a table's rows before its first layer row come before the layers, those after its
  // last one after them; enc.ln_f, between the stacks, is placed by the order check itself
  auto layer_row = [](const ParamRow& r) { return r.pattern.rfind("h.", 0) == 0 || r.pattern.rfind("enc.h.", 0) == 0; };
  for (size_t a = 0; a < rows.size();) {
    size_t b = a;
    while (b < rows.size() && rows[b].section == rows[a].section) b++;
    size_t first = b, last = a;
    for (size_t i = a; i < b; i++)
      if (layer_row(rows[i])) first = std::min(first, i), last = i;
    for (size_t i = a; i < b; i++) rows[i].phase = i < first ? 0 : i > last ? 2 : 1;
    // a layer row that is no sub-layer's: before or after the table's sub-layer rows
    auto sublayer_row = [](const ParamRow& r) {
      return r.pattern.find(".attn") != std::string::npos || r.pattern.find(".mlp") != std::string::npos ||
             r.pattern.find(".cross") != std::string::npos || r.pattern.find("{attn") != std::string::npos;
    };
    size_t first_sub = b, last_sub = a;
    for (size_t i = a; i < b; i++)
      if (sublayer_row(rows[i])) first_sub = std::min(first_sub, i), last_sub = i;
    for (size_t i = a; i < b; i++)
      if (layer_row(rows[i]) && !sublayer_row(rows[i]) && rows[i].alias.empty()) {
        EXPECT_TRUE(i < first_sub || i > last_sub) << "MODEL.md line " << rows[i].line << ": `" << rows[i].pattern
                                                    << "` sits among the sub-layer rows, so its place in a layer is not stated";
        rows[i].layer_slot = i < first_sub ? -1 : 3;
      }
    a = b;
  }
  return rows;
}

Symbols symbols_of(const ModelConfig& c) {
  return {{"C", c.d_model},        {"V", c.vocab_size()},     {"F", c.ff()},
          {"G", c.fc_width()},     {"HS", c.head_size()},     {"A", c.attn_width()},
          {"W", long(c.kv_heads()) * c.head_size()},        {"NH", c.n_heads},  {"GA", c.attn_gate_width()},
          {"n", c.hyper_streams},    {"Rh", c.hyper_connected() ? hyper_res_width(c) : 0},
          {"seq_len", c.seq_len}, {"type_vocab", c.type_vocab}, {"src_vocab", c.src_vocab_size()}};
}

// ---- the configs: every method, norm kind and architecture, with each switch ----

ModelConfig base(Arch arch, Placement p, NormKind norm) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 2;
  c.d_ff = 40;  // F, 2F, C and V all differ, so a wrong letter shows
  c.seq_len = 8;
  c.norm = norm;
  c.placement = {p};
  if (method_of(p).sphere) {  // nGPT's requirements
    c.norm = NormKind::L2;
    c.positions = Positions::Rope;
    c.bias = LinearBias::None;
  }
  return c;
}

struct Variant {
  const char* name;
  void (*apply)(ModelConfig&);
};
const Variant kVariants[] = {
    {"plain", [](ModelConfig&) {}},
    {"head untied", [](ModelConfig& c) { c.head = Head::Untied; }},
    {"head mlm", [](ModelConfig& c) { c.head = Head::Mlm; }},
    {"head none", [](ModelConfig& c) { c.head = Head::None; }},
    {"positions rope", [](ModelConfig& c) { c.positions = Positions::Rope; }},
    {"positions none", [](ModelConfig& c) { c.positions = Positions::None; }},
    {"positions learned", [](ModelConfig& c) { c.positions = Positions::Learned; }},
    {"type_vocab", [](ModelConfig& c) { c.type_vocab = 3; }},
    {"embed_norm", [](ModelConfig& c) { c.embed_norm = true; }},
    {"embed_scale_learned",
     [](ModelConfig& c) {
       c.positions = Positions::Rope;
       c.embed_scale_learned = true;
     }},
    {"qk_norm heads", [](ModelConfig& c) { c.qk_norm = QkNorm::Heads; }},
    {"qk_norm whole", [](ModelConfig& c) { c.qk_norm = QkNorm::Whole; }},
    {"qk_norm heads, v_norm",
     [](ModelConfig& c) {
       c.qk_norm = QkNorm::Heads;
       c.v_norm = true;
     }},
    {"qk_norm whole, v_norm, GQA",
     [](ModelConfig& c) {
       c.qk_norm = QkNorm::Whole;
       c.v_norm = true;
       c.n_kv_heads = 1;
     }},
    {"qk_norm heads, not affine",
     [](ModelConfig& c) {
       c.qk_norm = QkNorm::Heads;
       c.qk_norm_affine = false;
     }},
    {"attn_gate headwise", [](ModelConfig& c) { c.attn_gate = AttnGate::Headwise; }},
    {"attn_sink true", [](ModelConfig& c) { c.attn_sink = true; }},
    {"hyper hc", [](ModelConfig& c) { c.hyper = HyperMix::Hc; }},
    {"hyper hc_static", [](ModelConfig& c) { c.hyper = HyperMix::HcStatic; }},
    {"hyper mhc_lite, 3 streams",
     [](ModelConfig& c) {
       c.hyper = HyperMix::MhcLite;
       c.hyper_streams = 3;
     }},
    {"hyper mhc, 3 streams",
     [](ModelConfig& c) {
       c.hyper = HyperMix::Mhc;
       c.hyper_streams = 3;
     }},
    {"hyper attn_res, full",
     [](ModelConfig& c) {
       c.hyper = HyperMix::AttnRes;
       c.hyper_streams = c.attn_res_streams();
     }},
    {"hyper attn_res, blocks of 2",
     [](ModelConfig& c) {
       c.hyper = HyperMix::AttnRes;
       c.attn_res_block = 2;
       c.hyper_streams = c.attn_res_streams();
     }},
    {"attn_gate elementwise, bias none",
     [](ModelConfig& c) {
       c.attn_gate = AttnGate::Elementwise;
       c.bias = LinearBias::None;
     }},
    {"norm_bias false", [](ModelConfig& c) { c.norm_bias = false; }},
    {"bias qkv", [](ModelConfig& c) { c.bias = LinearBias::Qkv; }},
    {"bias none", [](ModelConfig& c) { c.bias = LinearBias::None; }},
    {"mlp false", [](ModelConfig& c) { c.mlp = false; }},
    {"swiglu", [](ModelConfig& c) { c.activation = Activation::SwiGlu; }},
    {"GQA", [](ModelConfig& c) { c.n_kv_heads = 1; }},
    {"head_dim", [](ModelConfig& c) { c.head_dim = 12; }},
    {"shared_embeddings false",
     [](ModelConfig& c) {
       c.shared_embeddings = false;
       c.src_vocab = 300;
     }},
    {"dec_layers", [](ModelConfig& c) { c.dec_layers = 3; }},
    {"residual false", [](ModelConfig& c) { c.residual = false; }},
    {"mixed with pre", [](ModelConfig& c) { c.placement = {c.placement[0], Placement::Pre}; }},
};

struct NamedConfig {
  std::string what;
  ModelConfig cfg;
};

std::vector<NamedConfig> all_configs() {
  std::vector<NamedConfig> out;
  for (Arch arch : {Arch::Gpt, Arch::Encoder, Arch::EncDec})
    for (NormKind norm : {NormKind::LayerNorm, NormKind::RMSNorm, NormKind::DyT, NormKind::Derf, NormKind::L2})
      for (const Method& m : all_methods())
        for (const Variant& v : kVariants) {
          ModelConfig c = base(arch, m.id, norm);
          v.apply(c);
          if (c.encdec() && c.placement.size() == 2) c.placement = {c.placement[0], c.placement[0], Placement::Pre, Placement::Pre};
          if (!c.violations().empty()) continue;
          out.push_back({fmt::format("arch {}, norm {}, placement {}, {}", to_string(arch), to_string(c.norm), m.name,
                                     v.name),
                         c});
        }
  return out;
}

// Where a tensor is in the canonical order MODEL.md states: (phase, layer, sub-layer, row, expansion).
using OrderKey = std::tuple<int, int, int, int, int>;

std::string method_names() {
  std::string s;
  for (const Method& m : all_methods()) s += std::string(s.empty() ? "" : " ") + m.name;
  return s;
}

}  // namespace

// Every tensor of every config matches exactly one row (name and shape), in the documented order;
// every name a row documents is created by some config.
TEST(ModelDoc, ParameterTablesMatchTheCode) {
  const std::vector<ParamRow> rows = param_rows(doc_lines());
  ASSERT_GE(rows.size(), 20u) << "too few rows in MODEL.md's parameter tables";
  const std::vector<NamedConfig> configs = all_configs();
  ASSERT_GE(configs.size(), 1000u);
  std::set<Placement> methods_built;
  for (const NamedConfig& nc : configs)
    for (Placement p : nc.cfg.placement) methods_built.insert(p);
  EXPECT_EQ(methods_built.size(), all_methods().size()) << "a method has no valid config here: " << method_names();

  std::set<std::pair<size_t, size_t>> produced;  // (row, expansion)
  std::map<std::string, std::string> failures;   // message -> the first config that shows it
  // one message for every layer ("h.{l}.attn.gain ..." for h.0 and h.1)
  const std::regex layer_number(R"((^|[ .(])h\.[0-9]+\.)");
  auto fail = [&](const std::string& msg, const std::string& what) {
    failures.emplace(std::regex_replace(msg, layer_number, "$1h.{l}."), what);
  };

  // the rows (and their expansions) a name matches, and the layer and rest it captures
  struct Match {
    size_t row, ex;
    std::smatch m;
  };
  auto matches = [&](const std::string& name, std::vector<Match>& out) {
    out.clear();
    for (size_t r = 0; r < rows.size(); r++)
      for (size_t e = 0; e < rows[r].ex.size(); e++) {
        std::smatch m;
        if (std::regex_match(name, m, rows[r].ex[e].re)) out.push_back({r, e, m});
      }
  };

  for (const NamedConfig& nc : configs) {
    const ModelConfig& c = nc.cfg;
    const Symbols sym = symbols_of(c);
    std::optional<OrderKey> previous;
    std::string previous_name;
    std::vector<Match> found;
    for (const ParamSpec& spec : make_param_table(c).specs) {
      matches(spec.name, found);
      if (found.size() != 1) {
        std::string which;
        for (const Match& f : found) which += fmt::format(" `{}` (line {})", rows[f.row].pattern, rows[f.row].line);
        fail(fmt::format("{} matches {} rows of MODEL.md's parameter tables{}", spec.name, found.size(), which),
             nc.what);
        continue;
      }
      Match hit = found[0];
      produced.insert({hit.row, hit.ex});
      std::string doc_name = spec.name;
      if (!rows[hit.row].alias.empty()) {  // `enc.h.{l}.*` as `h.{l}.*`: the name it stands for
        std::string target = rows[hit.row].alias;
        size_t group = 1;
        for (size_t at; (at = target.find("{l}")) != std::string::npos;) target.replace(at, 3, hit.m[group++].str());
        target.replace(target.find('*'), 1, hit.m[group].str());
        doc_name = target;
        matches(doc_name, found);
        if (found.size() != 1 || !rows[found[0].row].alias.empty()) {
          fail(fmt::format("{} (as {}) matches {} rows of MODEL.md's parameter tables", spec.name, doc_name,
                           found.size()),
               nc.what);
          continue;
        }
        hit = found[0];
        produced.insert({hit.row, hit.ex});
      }
      const ParamRow& row = rows[hit.row];
      // the shape
      if (!row.tuples.empty()) {
        const auto& dims = row.tuples.size() == 1 ? row.tuples[0] : row.tuples[size_t(row.ex[hit.ex].last_alt)];
        std::vector<int64_t> want;
        std::string unknown;
        for (const std::string& d : dims)
          if (auto v = eval(d, sym, &unknown)) want.push_back(*v);
        if (!unknown.empty())
          fail(fmt::format("MODEL.md line {}: the shape of `{}` names \"{}\", which is no dimension letter", row.line,
                           row.pattern, unknown),
               nc.what);
        else if (want != spec.shape)
          fail(fmt::format("{}: MODEL.md (line {}) gives shape {} = ({}), the code ({})", spec.name, row.line,
                           row.shape_cell.substr(0, row.shape_cell.find(')') + 1), fmt::join(want, ", "),
                           fmt::join(spec.shape, ", ")),
               nc.what);
      }
      // the order: before the layers, layer by layer (rezero, attn, cross, mlp), after them
      int layer = -1, sub = 0;
      const bool enc_layer = spec.name.rfind("enc.h.", 0) == 0;
      if (enc_layer || spec.name.rfind("h.", 0) == 0) {
        layer = std::stoi(spec.name.substr(enc_layer ? 6 : 2));
        if (c.encdec() && !enc_layer) layer += c.n_layers;
        sub = spec.name.ends_with(".rezero")          ? row.layer_slot
              : spec.name.find(".attn.") != std::string::npos ? 0
              : spec.name.find(".cross.") != std::string::npos ? 1
                                                                : 2;
      } else if (spec.name.rfind("enc.ln_f.", 0) == 0) {
        layer = c.n_layers - 1;  // after the encoder's last layer, before the decoder's first
        sub = 3;
      }
      const int phase = layer >= 0 ? 1 : row.phase;
      const OrderKey key{phase, layer, sub, int(hit.row), int(hit.ex)};
      if (previous && !(*previous < key))
        fail(fmt::format("{} follows {} in the code's order, but MODEL.md's order puts it before", spec.name,
                         previous_name),
             nc.what);
      previous = key;
      previous_name = spec.name;
    }
  }
  for (size_t r = 0; r < rows.size(); r++)
    for (size_t e = 0; e < rows[r].ex.size(); e++)
      if (!produced.count({r, e}))
        fail(fmt::format("MODEL.md line {} documents `{}`, which no config creates", rows[r].line, rows[r].ex[e].text),
             "");
  int shown = 0;  // the tensors no row documents first
  for (bool undocumented : {true, false})
    for (const auto& [msg, what] : failures)
      if ((msg.find(" matches 0 rows") != std::string::npos) == undocumented && shown++ < 100)
        ADD_FAILURE() << msg << (what.empty() ? "" : " [" + what + "]");
  EXPECT_LE(failures.size(), 100u) << "and " << failures.size() - std::min<size_t>(failures.size(), 100) << " more";
}

// The keys a run's config.json holds under `model` are the keys of MODEL.md's config tables: the
// main one for every model, the encoder-decoder's for encdec (src_vocab with shared_embeddings =
// false); and a file without the keys older writers left out at their values reads the same.
TEST(ModelDoc, ConfigKeysMatchTheWriter) {
  const std::vector<std::string> lines = doc_lines();
  std::set<std::string> main_keys, encdec_keys;
  for (const TableRow& t : table_rows(lines, "| key | type | default | meaning |")) {
    const std::string key = first_code(t.cells.empty() ? "" : t.cells[0]);
    if (t.section.rfind("## Config", 0) == 0) main_keys.insert(key);
    else if (t.section.rfind("## Encoder", 0) == 0) encdec_keys.insert(key);
  }
  ASSERT_GE(main_keys.size(), 40u);
  ASSERT_GE(encdec_keys.size(), 3u);

  auto written = [](const ModelConfig& m) {
    RunConfig rc;
    rc.model = m;
    const nlohmann::json j = run_config_to_json(rc);
    std::set<std::string> keys;
    for (const auto& item : j.at("model").items()) keys.insert(item.key());
    return keys;
  };
  auto diff = [](const std::set<std::string>& a, const std::set<std::string>& b) {
    std::vector<std::string> d;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
    return fmt::format("{}", fmt::join(d, " "));
  };
  ModelConfig gpt = base(Arch::Gpt, Placement::Pre, NormKind::LayerNorm);
  ModelConfig encdec = base(Arch::EncDec, Placement::Pre, NormKind::LayerNorm);
  ModelConfig own_src = encdec;
  own_src.shared_embeddings = false;
  own_src.src_vocab = 300;
  std::set<std::string> both = main_keys, shared = main_keys;
  both.insert(encdec_keys.begin(), encdec_keys.end());
  shared.insert(encdec_keys.begin(), encdec_keys.end());
  shared.erase("src_vocab");
  for (const auto& [cfg, want, what] : {std::tuple{gpt, main_keys, "a gpt"}, std::tuple{encdec, shared, "an encdec"},
                                        std::tuple{own_src, both, "an encdec with its own source embedding"}}) {
    const std::set<std::string> got = written(cfg);
    EXPECT_EQ(diff(want, got), "") << "keys of MODEL.md's config tables the writer leaves out for " << what;
    EXPECT_EQ(diff(got, want), "") << "keys the writer puts in " << what << "'s config.json that MODEL.md lacks";
  }
  // the placement row names every method (in its code span "`post pre ...`"), and the methods table
  // has a row for each
  std::set<std::string> listed;
  for (const std::string& l : lines)
    if (l.rfind("| `placement` |", 0) == 0) {
      const std::vector<std::string> row = cells(l);
      std::stringstream names(row.size() > 3 ? first_code(row[3]) : "");
      for (std::string n; names >> n;) listed.insert(n);
    }
  std::set<std::string> method_rows;
  for (const TableRow& t : table_rows(lines, "| method | norms | omega (shortcut) | lambda (branch) | final norm | source |"))
    method_rows.insert(first_code(t.cells[0]));
  for (const Method& m : all_methods()) {
    EXPECT_TRUE(listed.count(m.name)) << "MODEL.md's placement row does not list " << m.name;
    EXPECT_TRUE(method_rows.count(m.name)) << "MODEL.md's methods table has no row " << m.name;
  }

  // reading: without the keys a writer once omitted at these values, the same config
  for (const ModelConfig& cfg : {gpt, encdec}) {
    nlohmann::json j = model_config_to_json(cfg);
    for (const char* k : {"head_dim", "nope_every", "rope_freq_factors", "rope_mscale", "admin_init"}) j.erase(k);
    EXPECT_EQ(model_config_to_json(model_config_from_json(j, "test")), model_config_to_json(cfg));
    // and a run whose checkpoint lacks them resumes: its config implies what the writer now states
    RunConfig rc;
    rc.model = cfg;
    nlohmann::json saved = run_config_to_json(rc);
    saved["model"] = j;
    EXPECT_EQ(fmt::format("{}", fmt::join(resume_config_differences(saved, run_config_to_json(rc)), "; ")), "");
  }
}
