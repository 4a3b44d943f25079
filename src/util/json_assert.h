// json_assert.h: nlohmann::json's internal checks, made to throw in every build. The library
// guards a const operator[] with a key that is not there (and a few other misuses) by
// JSON_ASSERT, which is assert() -- nothing at all in a release build, so a results.json without a
// key the summary reads was a heap read past the end. Defined before <nlohmann/json.hpp> in every
// target (CMakeLists.txt: first in the precompiled headers; tests: -include), a missing key is a
// std::out_of_range that the readers turn into an Error naming the file.
#pragma once

#include <stdexcept>

#define JSON_ASSERT(x) \
  ((x) ? static_cast<void>(0) : throw std::out_of_range("JSON value has no such key or element (" #x ")"))
