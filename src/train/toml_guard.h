// toml_guard.h: what every TOML text passes before toml++ sees it. Debian's toml++ 3.3.0 reaches
// __builtin_unreachable (undefined behaviour: a crash or garbage) when its whitespace test meets
// some non-ASCII characters (U+00A1..U+0499 and others; upstream marzer/tomlplusplus#190 and #295):
// outside a string (where TOML 1.0 allows only ASCII anyway), and inside a multi-line basic string
// right after a backslash. check_toml_text refuses exactly those places, and ill-formed UTF-8 and
// NUL everywhere, with the line and column; valid TOML 1.0 is refused only for a non-ASCII
// character first after a line-ending backslash (write it as \uXXXX there).
#pragma once

#include <string>
#include <string_view>

namespace normlab {

void check_toml_text(std::string_view text, const std::string& where);

}  // namespace normlab
