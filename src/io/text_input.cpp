// text_input.cpp: reading and checking the text a command is given (text_input.h).
#include "io/text_input.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>

#include "io/unicode.h"
#include "util/error.h"
#include "util/files.h"

namespace normlab {

size_t max_text_bytes(long tokens, bool through_tokenizer) {
  const size_t n = size_t(std::max(1L, tokens));
  return through_tokenizer ? std::max<size_t>(size_t(64) << 10, n * kMaxBytesPerToken) : n;
}

TextInput read_text_input(const std::string& text, const std::string& file, size_t max_bytes,
                          const std::string& option) {
  TextInput in{text, option};
  if (!file.empty()) {
    in.where = fmt::format("{}-file '{}'", option, file);
    require_regular_file(file, option + "-file");
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(file, ec);
    if (!ec && max_bytes > 0 && size > max_bytes)
      throw Error(fmt::format("{}: {} bytes, more than the {} bytes this command can use (the model reads at most "
                              "that much); give a shorter text",
                              in.where, size, max_bytes));
    in.text = read_file(file, option + "-file");
  }
  unicode::check_utf8(in.text, in.where);
  return in;
}

}  // namespace normlab
