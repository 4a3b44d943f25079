// fuzz_checkpoint_config.cpp: libFuzzer harness of a checkpoint's embedded model config (the JSON
// text under the safetensors metadata key "config", read by checkpoint_config and load_model through
// model_config_from_text), then the parameter table it implies -- what load_model plans from it
// before it checks the file's tensors. A config that validates must not make that table large.
#include "fuzz/fuzz_util.h"
#include "model/config.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  normlab::fuzz::expect_clean([&] {
    const normlab::ModelConfig cfg =
        normlab::model_config_from_text({reinterpret_cast<const char*>(data), size}, "fuzz: metadata \"config\"");
    const normlab::ParamTable table = normlab::make_param_table(cfg);
    normlab::model_config_to_json(cfg).dump();  // what a checkpoint written from it would hold
  });
  return 0;
}
