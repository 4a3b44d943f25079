// init.h: the initialization schemes of docs/MODEL.md (normal, gpt2, xavier, deepnet, tfixup) and the
// initial values of the methods' scales. Each
// parameter draws from its own random stream (seed, parameter index), so adding a parameter does
// not change the others.
#pragma once

#include "model/config.h"
#include "model/params.h"

namespace normlab {

template <class S>
void init_params(S* params, const ParamTable& table, const ModelConfig& cfg);

}  // namespace normlab
