// model_hyper.cpp: the model's side of hyper-connections (model.hyper; the math is model/hyper.h): a
// hyper-connected sub-layer reads its branch input from the n streams before its stages and writes the
// streams after them, and the stack carries the streams from the embedding to the final norm; in
// reverse, d(loss)/d(the streams) runs down the slots in a ping-pong pair of (rows, n, C) buffers (and
// the stream-gradient reader sees the gradient of a shift of every stream); in forward mode, the
// streams' tangent runs up the slots the same way (model/hyper_jvp.cpp has the math).
#include <algorithm>

#include "model/branch.h"
#include "model/hyper.h"
#include "model/model.h"
#include "ops/common.h"

namespace normlab {

// u = sum_s P_s H_s into x_in; the next slot's streams start as R_t = sum_s M[s, t] H_s
template <class S>
void Model<S>::hyper_read(int i) {
  SublayerActs<S>& a = a_[size_t(i)];
  hyper_read_forward(cfg_, p_[size_t(i)].hc, a.hs_in, long(rows(i)), a.x_in, hstate_[size_t(i) + 1], a.hn, a.hrstd,
                     a.hmix, a.hpre);
  if (ablated_skips())  // (set_ablation: the residual mix dropped, R = 0)
    std::fill_n(hstate_[size_t(i) + 1], size_t(rows(i)) * cfg_.hyper_streams * cfg_.d_model, S(0));
}

// H'_t = R_t + b_t g; the slot's output stream (streams_[i + 1]) is their sum, or at attn_res's last slot
// the final read over them
template <class S>
void Model<S>::hyper_write(int i) {
  const SublayerActs<S>& a = a_[size_t(i)];
  hyper_write_forward(cfg_.hyper_streams, a.hmix, a.g, long(rows(i)), cfg_.d_model, hstate_[size_t(i) + 1],
                      a.x_out);
  if (attn_res_end(i))
    hyper_read_forward(cfg_, out_hc_, hstate_[size_t(i) + 1], long(rows(i)), a.x_out, static_cast<S*>(nullptr),
                       out_hn_, out_hrstd_, out_hmix_, out_hpre_);
}

// An MLP sub-layer removed (set_ablation): H' = H, and the slot's output is their sum as the write's
// (or attn_res's final read)
template <class S>
void Model<S>::hyper_pass(int i) {
  const SublayerActs<S>& a = a_[size_t(i)];
  const long N = long(rows(i));
  const int n = cfg_.hyper_streams, C = cfg_.d_model;
  S* H = hstate_[size_t(i) + 1];
  std::copy_n(a.hs_in, size_t(N) * n * C, H);
  if (attn_res_end(i)) {
    hyper_read_forward(cfg_, out_hc_, H, N, a.x_out, static_cast<S*>(nullptr), out_hn_, out_hrstd_, out_hmix_,
                       out_hpre_);
    return;
  }
  for (long r = 0; r < N; r++) {
    S* out = a.x_out + r * C;
    std::copy_n(H + r * n * C, C, out);
    for (int t = 1; t < n; t++)
      for (int c = 0; c < C; c++) out[c] += H[(r * n + t) * C + c];
  }
}

// H_t = x0 for every stream t; attn_res: stream 0 only (the blocks' streams start empty)
template <class S>
void Model<S>::hyper_stack_start(const S* x0, long rows, S* H) const {
  const int n = cfg_.hyper_streams, C = cfg_.d_model;
  for (long r = 0; r < rows; r++)
    for (int t = 0; t < n; t++) {
      S* h = H + (r * n + t) * C;
      if (hyper_stream_starts_at_x0(cfg_, t)) std::copy(x0 + r * C, x0 + (r + 1) * C, h);
      else std::fill(h, h + C, S(0));
    }
}

// dg = sum_t b_t dH'_t, then the stages in reverse down to du = d(loss)/d(x_in), then the read's
// reverse: dH_in from du and dR = dH_out
template <class S>
void Model<S>::hyper_sublayer_backward(int i, const S* dH_out, S* dH_in) {
  const SublayerActs<S>& a = a_[size_t(i)];
  const long N = rows(i);
  const int C = cfg_.d_model;
  S* dg = dr_;
  hyper_write_backward(cfg_.hyper_streams, a.hmix, a.g, dH_out, N, C, dg, dhmix_);
  S* du = dstream_[0];
  branch::zero(du, size_t(N) * C);  // (no shortcut assigns it: the stage that reads x_in adds into it)
  sublayer_backward(i, dg, du);
  hyper_read_backward(cfg_, p_[size_t(i)].hc, dp_[size_t(i)].hc, a.hs_in, N, du, dH_out, a.hn, a.hrstd, a.hmix,
                      a.hpre, dH_in, dhmix_, dhpre_, dhn_);
}

// dx_last (rows, C): d(loss)/d(the sum of the streams after slot last - 1). On return dx_first points
// at d(loss)/d(x0), x0 the embedding output every stream starts as (the sum over the streams' gradients).
// read: the stream-gradient reader sees, at slot last and at every slot below it, the gradient of a
// shift added to every stream entering it, sum_t dH_t (rows, C) (at slot 0, d(loss)/d(x0)).
template <class S>
void Model<S>::hyper_stack_backward(int first, int last, const S* dx_last, S*& dx_first, bool read) {
  const int n = cfg_.hyper_streams, C = cfg_.d_model;
  const long N = rows(first);
  S* dH = dhyper_[0];
  std::vector<S> shift(read ? size_t(N) * C : 0);
  auto read_shift = [&](int slot, const S* d) {
    for (long r = 0; r < N; r++)
      for (int c = 0; c < C; c++) {
        S sum = 0;
        for (int t = 0; t < n; t++) sum += d[(r * n + t) * C + c];
        shift[size_t(r) * C + size_t(c)] = sum;
      }
    stream_gradient_reader_(slot, shift.data());
  };
  if (attn_res_end(last - 1)) {  // the final read's reverse (no write after it: dR = 0)
    hyper_read_backward(cfg_, out_hc_, dout_hc_, hstate_[size_t(last)], N, dx_last, static_cast<const S*>(nullptr),
                        out_hn_, out_hrstd_, out_hmix_, out_hpre_, dH, dhmix_, dhpre_, dhn_);
  } else {  // sum = sum_t H_t:  dH_t = d(sum)
    for (long r = 0; r < N; r++)
      for (int t = 0; t < n; t++) std::copy(dx_last + r * C, dx_last + (r + 1) * C, dH + (r * n + t) * C);
  }
  if (read) read_shift(last, dH);
  clear_value_gradients();
  for (int i = last - 1; i >= first; i--) {
    if (!slots_[size_t(i)].present) continue;
    S* next = dH == dhyper_[0] ? dhyper_[1] : dhyper_[0];
    hyper_sublayer_backward(i, dH, next);
    dH = next;
    if (read) read_shift(i, dH);
  }
  // H_t = x0 for every t that starts there:  dx0 = the sum of their dH_t
  dx_first = dstream_[1];
#pragma omp parallel for schedule(static) if(N * n * C > ops::kParallelMinWork)
  for (long r = 0; r < N; r++)
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int t = 0; t < n; t++)
        if (hyper_stream_starts_at_x0(cfg_, t)) s += dH[(r * n + t) * C + c];
      dx_first[r * C + c] = S(s);
    }
}

template <class S>
size_t Model<S>::hyper_tangent_size(int K, long rows) const {
  if (!cfg_.hyper_connected()) return 0;
  const size_t KR = size_t(K) * size_t(rows);
  return 2 * KR * size_t(state_width()) + KR * size_t(hyper_mix_width(cfg_.hyper_streams)) +
         hyper_jvp_scratch(cfg_, K, rows);
}

template <class S>
S* Model<S>::carve_hyper_tangents(S* at, int K, long rows, HyperTangents& h) const {
  const size_t KR = size_t(K) * size_t(rows);
  h.tH = at;
  h.tR = h.tH + KR * size_t(state_width());
  h.tmix = h.tR + KR * size_t(state_width());
  h.scratch = h.tmix + KR * size_t(hyper_mix_width(cfg_.hyper_streams));
  return h.scratch + hyper_jvp_scratch(cfg_, K, rows);
}

// tu from tH (the read's tangent), the stages from tu to tg, tH' = tR + tb g + b tg (the write's)
template <class S>
void Model<S>::hyper_sublayer_jvp(int i, JvpFlow<S>& f, HyperTangents& h) const {
  const SublayerActs<S>& a = a_[size_t(i)];
  const long total = rows(i), r0 = long(f.rows.n), count = f.rows.rows;
  hyper_read_jvp(cfg_, p_[size_t(i)].hc, a.hs_in, a.hrstd, a.hmix, a.hpre, total, r0, count, f.K, h.tH, f.tx, h.tR,
                 h.tmix, h.scratch);
  sublayer_jvp(i, f);
  hyper_write_jvp(cfg_.hyper_streams, a.hmix, a.g, total, r0, count, f.K, cfg_.d_model, h.tmix, f.tx, h.tR);
  std::swap(h.tH, h.tR);
}

// model.cpp instantiates the class; the members defined here are instantiated here.
#define NL_INSTANTIATE(S)                                                               \
  template void Model<S>::hyper_read(int);                                              \
  template void Model<S>::hyper_write(int);                                             \
  template void Model<S>::hyper_pass(int);                                              \
  template void Model<S>::hyper_stack_start(const S*, long, S*) const;                  \
  template void Model<S>::hyper_sublayer_backward(int, const S*, S*);                   \
  template void Model<S>::hyper_stack_backward(int, int, const S*, S*&, bool);                  \
  template size_t Model<S>::hyper_tangent_size(int, long) const;                                \
  template S* Model<S>::carve_hyper_tangents(S*, int, long, typename Model<S>::HyperTangents&) const;            \
  template void Model<S>::hyper_sublayer_jvp(int, JvpFlow<S>&, typename Model<S>::HyperTangents&) const;
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
