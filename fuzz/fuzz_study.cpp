// fuzz_study.cpp: libFuzzer harness of a study file (`normlab compare --study F --set ...`): the TOML
// up to the first NUL, each later NUL-separated part one --set override, read by read_study_file
// (the grids expanded, every run's config resolved and validated, labels and directory names made).
#include "fuzz/fuzz_util.h"
#include "study/study.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = normlab::fuzz::split_at_nul(data, size);
  const std::string path = normlab::fuzz::write_scratch("study.toml", parts[0]);
  const std::vector<std::string> sets(parts.begin() + 1, parts.end());
  normlab::fuzz::expect_clean([&] {
    const normlab::study::Study s = normlab::study::read_study_file(path, sets);
    s.document.dump();  // saved with the results
  });
  return 0;
}
