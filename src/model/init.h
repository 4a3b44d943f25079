// init.h: the initialization schemes of docs/MODEL.md (normal, gpt2, xavier, deepnet, tfixup), the
// initial values of the methods' scales, and nGPT's projection of the matrices onto the sphere. Each
// parameter draws from its own random stream (seed, parameter index), so adding a parameter does
// not change the others.
#pragma once

#include "model/config.h"
#include "model/params.h"

namespace normlab {

template <class S>
void init_params(S* params, const ParamTable& table, const ModelConfig& cfg);

// nGPT (placement ngpt): every row of wte, lm_head, qkv and fc and every column of the proj matrices
// divided by its length, as the reference code does before the first step and after every optimizer
// step (the trainer calls it through Model::project_to_sphere). Nothing for other methods.
template <class S>
void project_to_sphere(S* params, const ParamTable& table, const ModelConfig& cfg);

}  // namespace normlab
