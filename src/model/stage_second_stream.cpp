// stage_second_stream.cpp: a two-stream stack's second stream as a stage (model/stage.h; ResiDual,
// model/methods.cpp): x_d = x_d + g, the branch's value added to x_d, which the stack's ending
// normalizes (Model::stack_end). It only reads the value.
#include "model/decode.h"
#include "model/model.h"
#include "model/stage_entry.h"
#include "ops/common.h"

namespace normlab {

struct SecondStream;

template <>
struct StageOps<SecondStream> {
  static constexpr const char* kName = "second_stream";
  static constexpr bool kTransforms = false, kBranch = false;
  static bool present(const ModelConfig& cfg, const Slot& slot) { return cfg.dual_stack(slot.layer); }

  template <class S>
  static void forward(Model<S>& m, int i) {
    S* xd = m.dual_of(i);
    if (!xd) return;
    const S* g = m.a_[size_t(i)].g;
    const size_t n = size_t(m.rows(i)) * m.cfg_.d_model;
#pragma omp parallel for schedule(static) if((long)n > ops::kParallelMinWork)
    for (long k = 0; k < (long)n; k++) xd[k] += g[k];
  }
  // dg += d(loss)/d(x_d)
  template <class S>
  static void backward(Model<S>&, int, BackwardFlow<S>& f) {
    if (!f.dd) return;
    S* out = f.fresh();
    const S* d = f.d;
    const S* dd = f.dd;
#pragma omp parallel for schedule(static) if((long)f.n > ops::kParallelMinWork)
    for (long k = 0; k < (long)f.n; k++) out[k] = d[k] + dd[k];
    f.d = out;
  }
  template <class S>
  static void jvp(const Model<S>& m, int, JvpFlow<S>& f) {
    if (!f.td) return;
    const size_t n = size_t(f.K) * f.rows.rows * m.cfg_.d_model;
    for (size_t k = 0; k < n; k++) f.td[k] += f.v[k];
  }
  template <class S>
  static void decode(IncrementalDecoder<S>&, int, DecodeFlow<S>& f) {
    if (!f.xd) return;
    for (size_t k = 0; k < f.xd->size(); k++) (*f.xd)[k] += f.v[k];
  }
};

NL_STAGE_ENTRY(SecondStream)

}  // namespace normlab
