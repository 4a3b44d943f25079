// stage_norm.cpp: the sub-layer's three norm sites as stages, side by side (model/stage.h): the input
// norm h = ln_in(x), the branch norm g = ln_branch(f) and the output norm x' = ln_out(r). Which a
// slot has is its method's (model/methods.cpp: NormSites); the kind of norm is model.norm
// (model/norm_of.h).
#include "model/decode.h"
#include "model/methods.h"
#include "model/model.h"
#include "model/stage_entry.h"

namespace normlab {

// The three sites, and the stage kind "the norm at a site" (the table's three entries).
struct InSite;
struct BranchSite;
struct OutSite;
template <class Site>
struct NormAt;

namespace {

// What distinguishes the three sites: whether a slot has it, its parameters and the activations
// that hold its input, output and statistics (model.h's SublayerActs).
template <class Site>
struct NormSite;

template <>
struct NormSite<InSite> {
  static constexpr const char* kName = "ln_in";
  static bool has(const NormSites& s) { return s.in; }
  template <class S>
  static const NormParams<S>& params(const SublayerParams<S>& p) { return p.ln_in; }
  template <class S>
  static S* in(const SublayerActs<S>& a) { return a.x_in; }
  template <class S>
  static S* out(const SublayerActs<S>& a) { return a.h; }
  template <class S>
  static S* mean(const SublayerActs<S>& a) { return a.in_mean; }
  template <class S>
  static S* rstd(const SublayerActs<S>& a) { return a.in_rstd; }
};

template <>
struct NormSite<BranchSite> {
  static constexpr const char* kName = "ln_branch";
  static bool has(const NormSites& s) { return s.branch; }
  template <class S>
  static const NormParams<S>& params(const SublayerParams<S>& p) { return p.ln_branch; }
  template <class S>
  static S* in(const SublayerActs<S>& a) { return a.f; }
  template <class S>
  static S* out(const SublayerActs<S>& a) { return a.g; }
  template <class S>
  static S* mean(const SublayerActs<S>& a) { return a.br_mean; }
  template <class S>
  static S* rstd(const SublayerActs<S>& a) { return a.br_rstd; }
};

template <>
struct NormSite<OutSite> {
  static constexpr const char* kName = "ln_out";
  static bool has(const NormSites& s) { return s.out; }
  template <class S>
  static const NormParams<S>& params(const SublayerParams<S>& p) { return p.ln_out; }
  template <class S>
  static S* in(const SublayerActs<S>& a) { return a.r; }
  template <class S>
  static S* out(const SublayerActs<S>& a) { return a.x_out; }
  template <class S>
  static S* mean(const SublayerActs<S>& a) { return a.out_mean; }
  template <class S>
  static S* rstd(const SublayerActs<S>& a) { return a.out_rstd; }
};

}  // namespace

// One norm site: out = norm(in) with the site's parameters and saved statistics.
template <class Site>
struct StageOps<NormAt<Site>> {
  using At = NormSite<Site>;
  static constexpr const char* kName = At::kName;
  static constexpr bool kTransforms = true, kBranch = false;
  static bool present(const ModelConfig& cfg, const Slot& slot) {
    return At::has(norm_sites(cfg.placement_of(slot.layer), slot.kind));
  }
  template <class S>
  static void forward(Model<S>& m, int i) {
    const SublayerActs<S>& a = m.a_[size_t(i)];
    m.norm_forward(At::out(a), At::mean(a), At::rstd(a), At::in(a), At::params(m.p_[size_t(i)]), m.rows(i));
  }
  template <class S>
  static void backward(Model<S>& m, int i, BackwardFlow<S>& f) {
    const SublayerActs<S>& a = m.a_[size_t(i)];
    S* din = f.input_gradient();
    m.norm_backward(din, At::params(m.dp_[size_t(i)]), f.d, At::in(a), At::params(m.p_[size_t(i)]), At::mean(a),
                    At::rstd(a), m.rows(i));
    f.d = din;
  }
  template <class S>
  static void jvp(const Model<S>& m, int i, JvpFlow<S>& f) {
    const SublayerActs<S>& a = m.a_[size_t(i)];
    const size_t n = f.rows.n, nC = f.nC(m.cfg_.d_model);
    S* out = f.fresh();
    m.norm_jvp(out, f.v, At::in(a) + nC, At::params(m.p_[size_t(i)]), At::mean(a) + n, At::rstd(a) + n, f.K,
               f.rows.rows);
    f.v = out;
  }
  template <class S>
  static void decode(IncrementalDecoder<S>& d, int i, DecodeFlow<S>& f) {
    std::vector<S>* out = f.fresh();
    d.norm(out->data(), f.v, At::params(d.m_.sublayer_params_of(i)));
    f.v = out->data();
  }
};

NL_STAGE_ENTRY(NormAt<InSite>)
NL_STAGE_ENTRY(NormAt<BranchSite>)
NL_STAGE_ENTRY(NormAt<OutSite>)

}  // namespace normlab
