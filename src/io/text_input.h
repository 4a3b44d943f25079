// text_input.h: the one way text enters a command (--text, --text-file, --source-text, --prompt): a
// file's size is checked against the most bytes the command can use before it is read (a 2 GB file
// for a model that reads 8 tokens is refused at once, naming both sizes), and every text must be
// UTF-8, with one message naming where (unicode::check_utf8's).
#pragma once

#include <cstddef>
#include <string>

namespace normlab {

struct TextInput {
  std::string text;
  std::string where;  // "--text", "--text-file 'notes.txt'": what the messages about it name
};

// The text of `option` (given on the command line) or of `file` when that is not empty. max_bytes:
// the most bytes the command can use (0: no limit), checked on a file before it is read (a text on
// the command line is already in memory: the command's own length check names it in tokens).
TextInput read_text_input(const std::string& text, const std::string& file, size_t max_bytes,
                          const std::string& option = "--text");

// The bytes a command that reads `tokens` tokens can use: `tokens` for a byte model, a generous
// kMaxBytesPerToken per token (at least 64 KiB) through a tokenizer.
inline constexpr size_t kMaxBytesPerToken = 1024;
size_t max_text_bytes(long tokens, bool through_tokenizer);

}  // namespace normlab
