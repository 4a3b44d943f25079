// unicode.h: the Unicode pieces the tokenizers need: strict UTF-8 decoding (errors name the byte
// offset), UTF-8 encoding and lossy decoding, and the character classes of the reference
// implementation (Hugging Face `tokenizers` 0.20.3), each answered by ICU.
//
// Byte-exactness means answering as the reference's libraries do, and they are pinned to older
// Unicode versions than ICU 72 (Unicode 15.0). Each class below emulates its library by keeping
// only the characters that ICU says were assigned by that version (u_charAge), plus the few
// characters whose category changed since (listed in unicode.cpp; checked once against the
// libraries' own tables, every code point):
//   GPT-2 regex \p{L} \p{N}    Oniguruma 6.9.8 (onig_sys 69.8.1)          Unicode 14.0
//   GPT-2 regex \s, BERT space  Unicode White_Space (Oniguruma, Rust std)  stable since 6.3
//   BERT control / punctuation / nonspacing mark   unicode_categories 0.1.1        Unicode 8.0
//   BERT strip_accents NFD      unicode-normalization-alignments 0.1.12   Unicode 9.0
//   BERT lowercase              Rust std char::to_lowercase (full, context-free)  ICU's 15.0
// (the last is the one approximation left: a character given a lowercase after Unicode 15.0.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace normlab::unicode {

// Throws Error "<where>: invalid UTF-8 at byte offset N (byte 0xNN)" at the first ill-formed
// sequence (overlong forms, surrogates and code points past U+10FFFF are ill-formed).
void check_utf8(std::string_view s, const std::string& where);

// Decodes well-formed UTF-8 (call check_utf8 first; ill-formed input is an assertion failure).
std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view s);

// Decodes any bytes, replacing each maximal ill-formed subsequence with U+FFFD (Rust's
// String::from_utf8_lossy, which the byte-level decoder of the reference uses).
std::string utf8_lossy(std::string_view bytes);

// GPT-2 pre-tokenizer classes (the regex's \s, \p{L}, \p{N}).
bool is_white_space(char32_t c);
bool is_letter(char32_t c);
bool is_number(char32_t c);
// Rust's char::is_numeric (Nd, Nl, No at the Unicode version of ICU here, 15.0 on Debian 12, as the
// Rust std the reference tokenizers 0.20.3 was built with): the Digits pre-tokenizer's class.
bool is_numeric(char32_t c);

// \w of the Rust regex crate (Alphabetic, marks, Nd, Pc, Join_Control): single_word added tokens.
bool is_word_char(char32_t c);

// BERT classes (unicode_categories 0.1.1): Cc, Cf or Co; any P*; Mn.
bool is_other(char32_t c);
bool is_punctuation(char32_t c);
bool is_nonspacing_mark(char32_t c);

// Canonical decomposition (NFD) as of Unicode 9.0: later characters neither decompose nor
// reorder (combining class 0), as in the reference's normalization library.
std::u32string nfd(std::u32string_view s);
// Canonical composition after nfd (NFC, UAX #15), within the same Unicode 9.0 data: a character
// joins the last starter when nothing between blocks it and the pair has a primary composite.
std::u32string nfc(std::u32string_view s);

// Appends the full, context-free lowercase of c ('İ' -> "i̇", 'Σ' -> "σ").
void append_lowercase(std::u32string& out, char32_t c);

}  // namespace normlab::unicode
