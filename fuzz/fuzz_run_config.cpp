// fuzz_run_config.cpp: libFuzzer harness of the run config: a TOML file (--config) and its
// `--set section.key=value` overrides, read as `normlab train` reads them (cli/main.cpp
// load_run_config). The input's text up to the first NUL is the TOML file, each later NUL-separated
// part one override.
#include "fuzz/fuzz_util.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = normlab::fuzz::split_at_nul(data, size);
  const std::string path = normlab::fuzz::write_scratch("config.toml", parts[0]);
  const std::vector<std::string> sets(parts.begin() + 1, parts.end());
  normlab::fuzz::expect_clean([&] {
    nlohmann::json doc = normlab::read_toml(path);
    normlab::apply_overrides(doc, sets);
    const normlab::RunConfig cfg = normlab::run_config_from_json(doc, "'" + path + "'");
    normlab::run_config_to_json(cfg).dump();  // the run directory's config.json
  });
  return 0;
}
