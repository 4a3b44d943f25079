// stage_branch.cpp: the branch F as a stage (model/stage.h): f = F(h) by the slot's kind of sub-layer
// (self-attention, cross-attention, MLP), each kind in its own file with its modes side by side
// (model/branch_attn.cpp, branch_cross.cpp, branch_mlp.cpp). The one place that picks a branch by
// the slot's kind (never by its position); -Werror=switch flags a kind missing from a mode.
#include <fmt/format.h>

#include "model/decode.h"
#include "model/model.h"
#include "model/stage_entry.h"
#include "util/error.h"

namespace normlab {

struct Branch;

template <>
struct StageOps<Branch> {
  static constexpr const char* kName = "branch";
  static constexpr bool kTransforms = true, kBranch = true;
  static bool present(const ModelConfig&, const Slot&) { return true; }

  // a.f = F(a.h)
  template <class S>
  static void forward(Model<S>& m, int i) {
    switch (m.slots_[size_t(i)].kind) {
      case Sublayer::Attn: return m.attn_forward(i);
      case Sublayer::Cross: return m.cross_forward(i);
      case Sublayer::Mlp: return m.mlp_forward(i);
    }
  }

  // dh += J_F^T df (and F's parameter gradients)
  template <class S>
  static void backward(Model<S>& m, int i, BackwardFlow<S>& f) {
    S* dh = f.input_gradient();
    switch (m.slots_[size_t(i)].kind) {
      case Sublayer::Attn: m.attn_backward(i, f.d, dh); break;
      case Sublayer::Cross: m.cross_backward(i, f.d, dh); break;
      case Sublayer::Mlp: m.mlp_backward(i, f.d, dh); break;
    }
    f.d = dh;
  }

  // tf = J_F th, over the walk's rows (every row, or one token's)
  template <class S>
  static void jvp(const Model<S>& m, int i, JvpFlow<S>& f) {
    S* tf = f.fresh();
    const JvpRows& v = f.rows;
    switch (m.slots_[size_t(i)].kind) {
      case Sublayer::Attn:
        if (v.token_local) m.attn_jvp_token(i, tf, f.v, f.K, v.token, v.batch_row, f.sc);
        else m.attn_jvp(i, tf, f.v, f.K, f.sc);
        break;
      case Sublayer::Cross:
        if (v.token_local) throw Error("token-local Jacobians of cross-attention are not implemented");
        m.cross_jvp(i, tf, f.v, f.K, f.tmem, f.sc);
        break;
      case Sublayer::Mlp:
        if (v.token_local) m.mlp_jvp_token(i, tf, f.v, f.K, v.n, f.sc);
        else m.mlp_jvp(i, tf, f.v, f.K, f.sc);
        break;
    }
    f.v = tf;
  }

  // this position's f = F(h), into the decoder's branch output
  template <class S>
  static void decode(IncrementalDecoder<S>& d, int i, DecodeFlow<S>& f) {
    const SublayerParams<S>& p = d.m_.sublayer_params_of(i);
    switch (d.m_.config().slot(i).kind) {
      case Sublayer::Attn: d.attn_step(i, f.v, p); break;
      case Sublayer::Cross: d.cross_step(i, f.v, p); break;
      case Sublayer::Mlp: d.mlp_step(f.v, p); break;
    }
    f.v = f.branch_out->data();
  }
};

NL_STAGE_ENTRY(Branch)

}  // namespace normlab
