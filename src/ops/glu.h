// glu.h: gated linear units of the feed-forward block (Shazeer 2020): out = act(gate) * up, with the
// fc projection's output hid holding each row as [gate (F) | up (F)]. SwiGLU (act = SiLU, x
// sigmoid(x): Llama, Qwen, SmolLM) and GeGLU (act = GELU, tanh form: Gemma). Legend and conventions:
// ops/common.h.
#pragma once

namespace normlab::ops {

enum class GluAct { Silu, Gelu };

// out (N, F) = act(hid[:, :F]) * hid[:, F:]; hid (N, 2F).
template <class S>
void glu_forward(GluAct act, S* out, const S* hid, int N, int F);

// dhid (N, 2F) +=: gate act'(g) u dout, up act(g) dout; dout (N, F).
template <class S>
void glu_backward(GluAct act, S* dhid, const S* hid, const S* dout, int N, int F);

// Forward-mode tangents for K tangents: tout (K, N, F) = act'(g) u tg + act(g) tu, thid (K, N, 2F).
template <class S>
void glu_jvp(GluAct act, S* tout, const S* hid, const S* thid, int N, int F, int K);

}  // namespace normlab::ops
