// unicode.cpp: UTF-8 and the reference's character classes on top of ICU (see unicode.h for which
// Unicode version each class emulates and why).
#include "io/unicode.h"

#include <fmt/format.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>

#include "util/error.h"

namespace normlab::unicode {

namespace {

// One step of UTF-8 decoding (Unicode Table 3-7, well-formed byte sequences). On an ill-formed
// sequence `len` is its maximal subpart: the bytes that were a valid prefix, at least one.
struct Utf8Step {
  int len;
  bool ok;
  char32_t cp;
};

Utf8Step utf8_step(const unsigned char* p, size_t avail) {
  const unsigned b0 = p[0];
  if (b0 < 0x80) return {1, true, b0};
  int need;
  char32_t cp;
  unsigned lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {1, false, 0};
  }
  for (int k = 1; k <= need; ++k) {
    if (size_t(k) >= avail) return {k, false, 0};
    const unsigned b = p[k];
    if (b < lo || b > hi) return {k, false, 0};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {need + 1, true, cp};
}

// True if c was assigned by Unicode major.minor (ICU's Age property).
bool assigned_by(char32_t c, int major, int minor) {
  UVersionInfo age;
  u_charAge(UChar32(c), age);
  return age[0] < major || (age[0] == major && age[1] <= minor);
}

uint32_t category_mask(char32_t c) { return U_GET_GC_MASK(UChar32(c)); }

}  // namespace

void check_utf8(std::string_view s, const std::string& where) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(p + i, s.size() - i);
    if (!st.ok) {
      std::string bytes;
      const size_t shown = std::min(s.size() - i, size_t(st.len) + 1);
      for (size_t k = 0; k < shown; ++k) bytes += fmt::format("{}{:02x}", k ? " " : "", p[i + k]);
      // a valid lead byte whose continuation bytes run past the end
      const bool truncated = p[i] >= 0xC2 && p[i] <= 0xF4 && i + size_t(st.len) == s.size();
      throw Error(fmt::format("{}: invalid UTF-8 at byte offset {} (bytes {}{})", where, i, bytes,
                              truncated ? ", truncated" : ""));
    }
    i += size_t(st.len);
  }
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(p + i, s.size() - i);
    NL_ASSERT(st.ok);
    out.push_back(st.ok ? st.cp : U'\uFFFD');
    i += size_t(st.len);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Step st = utf8_step(p + i, bytes.size() - i);
    if (st.ok)
      out.append(bytes.substr(i, size_t(st.len)));
    else
      append_utf8(out, U'\uFFFD');
    i += size_t(st.len);
  }
  return out;
}

bool is_white_space(char32_t c) { return u_isUWhiteSpace(UChar32(c)); }

// Oniguruma 6.9.8's tables are Unicode 14.0; no letter or number changed category since (checked).
bool is_letter(char32_t c) { return (category_mask(c) & U_GC_L_MASK) && assigned_by(c, 14, 0); }
bool is_number(char32_t c) { return (category_mask(c) & U_GC_N_MASK) && assigned_by(c, 14, 0); }
bool is_numeric(char32_t c) { return category_mask(c) & U_GC_N_MASK; }

bool is_word_char(char32_t c) {
  return u_hasBinaryProperty(UChar32(c), UCHAR_ALPHABETIC) ||
         (category_mask(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(UChar32(c), UCHAR_JOIN_CONTROL);
}

// unicode_categories 0.1.1 is Unicode 8.0. Its Cc and Cf are exactly ICU's characters of age <= 8.0
// in those categories; its P* and Mn differ by the characters whose category changed since 8.0:
// U+166D (Po then, So now), U+111C9 (Po then, Mn now), U+1734 (Mn then, Mc now), U+1885, U+1886
// (Lo then, Mn now), U+A9BD (Mc then, Mn now).
bool is_other(char32_t c) {
  return (category_mask(c) & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK)) && assigned_by(c, 8, 0);
}

bool is_punctuation(char32_t c) {
  if (c == 0x166D || c == 0x111C9) return true;
  return (category_mask(c) & U_GC_P_MASK) && assigned_by(c, 8, 0);
}

bool is_nonspacing_mark(char32_t c) {
  if (c == 0x1734) return true;
  if (c == 0x1885 || c == 0x1886 || c == 0xA9BD || c == 0x111C9) return false;
  return (category_mask(c) & U_GC_MN_MASK) && assigned_by(c, 8, 0);
}

std::u32string nfd(std::u32string_view s) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* nfd_instance = unorm2_getNFDInstance(&status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU: no NFD data ({})", u_errorName(status)));
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    UChar buf[32];
    status = U_ZERO_ERROR;
    const int32_t n = assigned_by(c, 9, 0)
                          ? unorm2_getDecomposition(nfd_instance, UChar32(c), buf, 32, &status)
                          : -1;
    if (n <= 0 || U_FAILURE(status)) {
      out.push_back(c);
      continue;
    }
    for (int32_t k = 0; k < n;) {
      UChar32 d;
      U16_NEXT(buf, k, n, d);
      out.push_back(char32_t(d));
    }
  }
  // Canonical ordering: a stable sort by combining class of every run of non-starters.
  auto ccc = [](char32_t c) { return assigned_by(c, 9, 0) ? u_getCombiningClass(UChar32(c)) : 0; };
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + long(i), out.begin() + long(j),
                     [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  return out;
}

std::u32string nfc(std::u32string_view s) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* nfc_instance = unorm2_getNFCInstance(&status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU: no NFC data ({})", u_errorName(status)));
  auto ccc = [](char32_t c) { return assigned_by(c, 9, 0) ? int(u_getCombiningClass(UChar32(c))) : 0; };
  const std::u32string d = nfd(s);
  std::u32string out;
  out.reserve(d.size());
  size_t starter = std::u32string::npos;  // index in out of the last starter
  int last = -1;                          // combining class of the last character after it (-1: none)
  for (char32_t c : d) {
    const int cc = ccc(c);
    if (starter != std::u32string::npos && (last == -1 || (last != 0 && last < cc))) {
      const UChar32 composite = unorm2_composePair(nfc_instance, UChar32(out[starter]), UChar32(c));
      if (composite >= 0 && assigned_by(char32_t(composite), 9, 0)) {
        out[starter] = char32_t(composite);
        continue;
      }
    }
    if (cc == 0) {
      starter = out.size();
      last = -1;
    } else {
      last = cc;
    }
    out.push_back(c);
  }
  return out;
}

void append_lowercase(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  // One code point at a time: the root locale's full mapping, with no context (so Σ is never the
  // final sigma), which is what Rust's char::to_lowercase gives.
  UChar src[2], dst[8];
  int32_t n = 0;
  U16_APPEND_UNSAFE(src, n, UChar32(c));
  UErrorCode status = U_ZERO_ERROR;
  const int32_t m = u_strToLower(dst, 8, src, n, "", &status);
  if (U_FAILURE(status) || m > 8) {
    out.push_back(c);
    return;
  }
  for (int32_t k = 0; k < m;) {
    UChar32 d;
    U16_NEXT(dst, k, m, d);
    out.push_back(char32_t(d));
  }
}

}  // namespace normlab::unicode
