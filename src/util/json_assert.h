// json_assert.h: nlohmann::json made safe on hostile values, in every build and every target
// (included before <nlohmann/json.hpp>: first in the precompiled headers of CMakeLists.txt, and by
// -include in the tests).
//  - JSON_ASSERT throws: the library guards a const operator[] with a key that is not there (and a
//    few other misuses) by JSON_ASSERT, which is assert() -- nothing in a release build, so a
//    results.json without a key the summary reads was a heap read past the end.
//  - every conversion of a JSON number to an integer type (get<long>(), get<int>(), get<size_t>(),
//    implicit conversions) is range-checked: the library's static_cast of 1e300 or NaN to an
//    integer is undefined behaviour, and 2^32 + 16 became 16 in an int.
// Both throw std::out_of_range / std::domain_error, which the readers turn into an Error naming the
// file, and main() into one message with exit code 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

// A function, not a throw-expression: the library also asserts its invariants in noexcept
// functions, where those always hold (and a direct throw would warn).
[[noreturn]] inline void normlab_json_assert_failed(const char* check) {
  throw std::out_of_range(std::string("JSON value has no such key or element (") + check + ")");
}

#define JSON_ASSERT(x) ((x) ? static_cast<void>(0) : normlab_json_assert_failed(#x))

#include <nlohmann/json_fwd.hpp>

namespace normlab::json_detail {

// j's number as an I, or an exception naming the value: never a wrapped or undefined conversion.
template <class I, class Json>
I checked_integer(const Json& j) {
  using Int = typename Json::number_integer_t;
  using UInt = typename Json::number_unsigned_t;
  using Float = typename Json::number_float_t;
  constexpr auto lo = std::numeric_limits<I>::min();
  constexpr auto hi = std::numeric_limits<I>::max();
  if (j.is_number_unsigned()) {
    const UInt u = j.template get_ref<const UInt&>();
    if (u <= UInt(hi)) return I(u);
    throw std::out_of_range("JSON number " + std::to_string(u) + " is out of range for an integer of this field");
  }
  if (j.is_number_integer()) {
    const Int i = j.template get_ref<const Int&>();
    if ((i >= 0 && UInt(i) <= UInt(hi)) || (i < 0 && std::is_signed_v<I> && i >= Int(lo))) return I(i);
    throw std::out_of_range("JSON number " + std::to_string(i) + " is out of range for an integer of this field");
  }
  if (j.is_number_float()) {
    const Float d = j.template get_ref<const Float&>();
    // lo and hi + 1 are powers of two, exactly representable
    if (d == std::floor(d) && d >= Float(lo) && d < 2 * Float(hi / 2 + 1)) return I(d);
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", double(d));
    throw std::out_of_range(std::string("JSON number ") + text + " is not an integer in the range of this field");
  }
  if (j.is_boolean()) return I(j.template get_ref<const typename Json::boolean_t&>());
  throw std::domain_error(std::string("JSON value of type ") + j.type_name() + " where an integer was expected");
}

template <class I>
struct checked_integer_serializer {
  template <class Json>
  static void from_json(const Json& j, I& out) {
    out = checked_integer<I>(j);
  }
  template <class Json>
  static void to_json(Json& j, I v) {  // as the library stores it, without a conversion through I
    if constexpr (std::is_signed_v<I>) {
      j = Json(Json::value_t::number_integer);
      j.template get_ref<typename Json::number_integer_t&>() = typename Json::number_integer_t(v);
    } else {
      j = Json(Json::value_t::number_unsigned);
      j.template get_ref<typename Json::number_unsigned_t&>() = typename Json::number_unsigned_t(v);
    }
  }
};

}  // namespace normlab::json_detail

NLOHMANN_JSON_NAMESPACE_BEGIN
template <>
struct adl_serializer<int, void> : normlab::json_detail::checked_integer_serializer<int> {};
template <>
struct adl_serializer<unsigned, void> : normlab::json_detail::checked_integer_serializer<unsigned> {};
template <>
struct adl_serializer<long, void> : normlab::json_detail::checked_integer_serializer<long> {};
template <>
struct adl_serializer<unsigned long, void> : normlab::json_detail::checked_integer_serializer<unsigned long> {};
template <>
struct adl_serializer<long long, void> : normlab::json_detail::checked_integer_serializer<long long> {};
template <>
struct adl_serializer<unsigned long long, void>
    : normlab::json_detail::checked_integer_serializer<unsigned long long> {};
NLOHMANN_JSON_NAMESPACE_END
