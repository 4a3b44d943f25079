// toml_guard.cpp: the pre-scan of TOML text before toml++ (toml_guard.h): a small lexer that knows
// only where strings and comments begin and end.
#include "train/toml_guard.h"

#include <fmt/format.h>

#include "io/unicode.h"
#include "util/error.h"

namespace normlab {

void check_toml_text(std::string_view text, const std::string& where) {
  unicode::check_utf8(text, where);
  const size_t n = text.size();
  auto fail = [&](size_t at, const std::string& what) {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at; i++) {
      if (text[i] == '\n') line++, column = 1;
      else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) column++;  // count characters
    }
    throw Error(fmt::format("{} line {}, column {}: {}", where, line, column, what));
  };
  auto at = [&](size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  auto non_ascii = [&](size_t i) { return i < n && static_cast<unsigned char>(text[i]) >= 0x80; };
  enum class State { Normal, Comment, Basic, Literal, MlBasic, MlLiteral } state = State::Normal;
  // The last character outside strings and comments that is not a space or tab: a string begins
  // only where a key or value can (after a newline, =, [, {, a comma or a dot); a quote elsewhere
  // (1"x", -"x") is invalid TOML, which toml++ would scan past its end in search of a terminator.
  char prev = '\n';
  // Brackets open outside strings ('[' or '{'), and whether a value (not a key) is being read: a
  // dot separates keys, so a string may follow it in a key but not in a value (1."x" is invalid).
  std::string open;
  bool in_value = false;
  for (size_t i = 0; i < n; i++) {
    const char c = text[i];
    if (c == '\0') fail(i, "a NUL byte (not TOML text)");
    if (state == State::Normal && (c == '[' || c == '{') && std::string_view("\n=[{,").find(prev) == std::string_view::npos)
      fail(i, fmt::format("'{}' inside a bare key or value (an array or table begins after =, [, a comma or a new "
                          "line)", c));
    if (state == State::Normal && (c == '"' || c == '\'')) {
      const std::string_view starts = in_value ? "\n=[{," : "\n=[{,.";
      if (starts.find(prev) == std::string_view::npos)
        fail(i, "a quote inside a bare key or value (a string begins after =, [, {, a comma, a dot in a key, or a "
                "new line)");
    }
    if (state == State::Normal) {
      if (c == '=') in_value = true;
      else if (c == '[' || c == '{') open += c, in_value = c == '[' && in_value;
      else if ((c == ']' || c == '}') && !open.empty()) open.pop_back();
      else if (c == ',') in_value = !open.empty() && open.back() == '[';
      else if (c == '\n' && open.empty()) in_value = false;
      if (c != ' ' && c != '\t' && c != '\r') prev = c;
    } else {
      prev = '"';  // a string (or comment) closes as a value or key would
    }
    switch (state) {
      case State::Normal:
        if (c == '#') state = State::Comment;
        else if (at(i, "\"\"\"")) state = State::MlBasic, i += 2;
        else if (at(i, "'''")) state = State::MlLiteral, i += 2;
        else if (c == '"') state = State::Basic;
        else if (c == '\'') state = State::Literal;
        else if (non_ascii(i))
          fail(i, "a non-ASCII character outside a string or comment (TOML keys and non-string values are ASCII; "
                  "quote it)");
        break;
      case State::Comment:
        if (c == '\n') {
          state = State::Normal, prev = '\n';
          if (open.empty()) in_value = false;
        }
        break;
      case State::Literal:
        if (c == '\'' || c == '\n') state = State::Normal;
        break;
      case State::MlLiteral:
        if (at(i, "'''")) {
          i += 2;
          while (i + 1 < n && text[i + 1] == '\'') i++;  // up to two more quotes end the string
          state = State::Normal;
        }
        break;
      case State::Basic:
      case State::MlBasic:
        if (c == '\\') {
          size_t j = i + 1;
          while (j < n && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
          if (non_ascii(j)) fail(j, "a backslash before a non-ASCII character (not a TOML escape)");
          if (state == State::MlBasic && j < n && text[j] == '\n') {  // a line-ending backslash
            while (j < n && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) j++;
            if (non_ascii(j))
              fail(j, "a non-ASCII character first after a line-ending backslash, which toml++ 3.3.0 cannot parse "
                      "safely; write it as a \\uXXXX escape");
            i = j - 1;
          } else {
            i++;  // an escape: the next character is not a quote that ends the string
          }
        } else if (state == State::Basic && (c == '"' || c == '\n')) {
          state = State::Normal;
        } else if (state == State::MlBasic && at(i, "\"\"\"")) {
          i += 2;
          while (i + 1 < n && text[i + 1] == '"') i++;
          state = State::Normal;
        }
        break;
    }
  }
}

}  // namespace normlab
