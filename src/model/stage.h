// stage.h: a sub-layer as a list of stages, walked once per mode. A stage kind (the input norm, the
// branch F, dropout, the branch norm, the second stream, Admin's profiling, the shortcut, the output
// norm) is one file, model/stage_<kind>.cpp, with its forward, backward, forward-mode and decoding
// step side by side; model/stages.cpp lists the kinds in the order a sub-layer runs them. The walks
// (Model::sublayer_forward, sublayer_backward, sublayer_jvp, the closed-form block Jacobian and
// IncrementalDecoder::step) visit the slot's stages and know none of them by name.
//
// Between stages flows "the value": it starts as the stream x entering the sub-layer, each stage
// that transforms it replaces it (h = ln_in(x), f = F(h), g = ln_branch(f), r = shortcut(x, g),
// x' = ln_out(r)), and the sub-layer's output is the value at the end. A stage that only reads it
// (the second stream, Admin's profiling) leaves it. Internal to src/model/.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "model/config.h"

namespace normlab {

template <class S>
class Model;
template <class S>
class IncrementalDecoder;

// Each stage kind specializes StageOps<Kind> in its file (Kind a tag struct). Model and
// IncrementalDecoder befriend every specialization, so a stage reads the activations, parameters and
// scratch it needs without widening their public interface.
template <class Kind>
struct StageOps;

// The rows a forward-mode walk reads of the last forward's activations: every row of the slot (the
// full sequence: n = 0, rows = B T), or one token's (the token-local Jacobian: row n = batch_row T +
// token, one row per tangent, attention's tangent at that token only).
struct JvpRows {
  bool token_local = false;
  size_t n = 0;
  int rows = 0;
  int token = 0, batch_row = 0;
};

// The branches' forward-mode scratch, sized by the walk's caller.
template <class S>
struct JvpScratch {
  S* hid = nullptr;  // (K, rows, max(qkv, fc width))
  S* att = nullptr;  // (K, B, NH, T, max(T, S)), or (K, T) one head's scores at one token
  S* mix = nullptr;  // (K, rows, max(C, F)), and the MLP's fold
  S* kv = nullptr;   // (K, B, S, 2C): the memory's key-value tangents
  S* values = nullptr;  // value residual: the source's value tangents (K, rows, v width), written at the
                        // source, read by the later self-attentions; null: the source is outside the walk (held)
};

// Reverse mode through one slot, the stages in reverse order.
template <class S>
struct BackwardFlow {
  const S* d = nullptr;       // in: d(loss)/d(the stage's output value); a stage that transforms sets it to d/d(its input)
  S* dx = nullptr;            // d(loss)/d(the stream entering the sub-layer) (rows, C): the shortcut assigns it,
                              // the stage that reads the stream adds into it
  const S* dd = nullptr;      // d(loss)/d(x_d) of a two-stream stack, or null
  size_t n = 0;               // rows * C
  S* pool[2] = {nullptr, nullptr};  // scratch (rows, C), never the stream's buffers
  bool reads_stream = false;  // set by the walk: this stage's input is the stream itself
  // A scratch buffer other than d, for a stage's result.
  S* fresh() const { return pool[0] == d ? pool[1] : pool[0]; }
  // Where a transforming stage adds its input's gradient: dx if its input is the stream, else a
  // zeroed scratch buffer (every backward kernel adds into its input gradient).
  S* input_gradient() const;  // (model/stage_entry.h)
};

// Forward mode through one slot: K tangents of `rows.rows` rows each.
template <class S>
struct JvpFlow {
  S* tx = nullptr;            // the stream's tangent (K, rows, C); at the end of the walk, the output's
  const S* v = nullptr;       // the value's tangent
  S* pool[2] = {nullptr, nullptr};  // scratch of tx's size, never tx
  int K = 0;
  JvpRows rows;
  JvpScratch<S> sc;
  const S* tmem = nullptr;    // the memory's tangent (cross-attention), or null
  S* td = nullptr;            // a two-stream stack's second-stream tangent (g's tangent added in), or null
  size_t nC(int C) const { return rows.n * size_t(C); }  // offset of the walk's first row in the activations
  S* fresh() const { return pool[0] == v ? pool[1] : pool[0]; }
  // After the stages: the output's tangent into tx (a pointer swap with the buffer holding it).
  void finish() {
    for (S*& b : pool)
      if (b == v) {
        std::swap(b, tx);
        v = tx;
        return;
      }
  }
};

// One position of incremental decoding through one slot (rows = the decoder's B).
template <class S>
struct DecodeFlow {
  std::vector<S>* x = nullptr;  // the stream (B, C); at the end, the output
  const S* v = nullptr;
  std::vector<S>* xd = nullptr;  // a two-stream decoder's second stream, or null
  std::vector<S>* pool[3] = {nullptr, nullptr, nullptr};  // scratch (B, C), never x
  std::vector<S>* branch_out = nullptr;  // where the branch's step writes (the decoder's f)
  std::vector<S>* fresh() const { return pool[0]->data() == v ? pool[1] : pool[0]; }
  void finish() {
    for (std::vector<S>* b : {pool[0], pool[1], pool[2], branch_out})
      if (b->data() == v) {
        x->swap(*b);
        v = x->data();
        return;
      }
  }
};

// A stage kind: whether a slot has it, whether it replaces the value, and its four modes.
template <class S>
struct StageFns {
  const char* name;
  bool transforms;  // replaces the value (else only reads it)
  bool branch;      // the branch F itself (the closed-form block Jacobian takes its place)
  bool (*present)(const ModelConfig& cfg, const Slot& slot);
  void (*forward)(Model<S>& m, int i);
  void (*backward)(Model<S>& m, int i, BackwardFlow<S>& f);
  void (*jvp)(const Model<S>& m, int i, JvpFlow<S>& f);
  void (*decode)(IncrementalDecoder<S>& d, int i, DecodeFlow<S>& f);
};

// The stage kinds in the order a sub-layer runs them (model/stages.cpp).
template <class S>
const std::vector<StageFns<S>>& stage_kinds();

// The entry of stage kind Kind, stage_entry((Kind*)nullptr, (S*)nullptr): declared in model/stages.cpp
// by NL_STAGE_KIND(Kind), defined in the kind's own file by NL_STAGE_ENTRY(Kind) (model/stage_entry.h).
#define NL_STAGE_KIND(...)                                \
  StageFns<float> stage_entry(__VA_ARGS__*, float*);   \
  StageFns<double> stage_entry(__VA_ARGS__*, double*);

}  // namespace normlab
