// embedding.h: token plus learned-position embedding, x = wte[ids] + wpe[t], and the optional
// token-type embedding added to it (BERT).
// Legend and conventions: ops/common.h. Token ids are checked at the API boundary, not here.
#pragma once

#include <cstdint>

namespace normlab::ops {

// out (B, T, C); ids (B, T); wte (V, C); wpe (>= T, C), or null: no learned positions.
template <class S>
void embedding_forward(S* out, const int32_t* ids, const S* wte, const S* wpe, int B, int T, int C);

// dwte (V, C) +=, dwpe (>= T, C) += (or null); dout (B, T, C). Rows sharing a token id are summed in row
// order (serial over rows, parallel over channels), so the result is deterministic.
template <class S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* ids, int B, int T, int C);

// Token-type (segment) embedding, as BERT's: out (N, C) += wtt[types]; types (N); wtt (types, C).
template <class S>
void token_type_forward(S* out, const int32_t* types, const S* wtt, int N, int C);
// dwtt (types, C) += rows of dout, summed in row order (deterministic).
template <class S>
void token_type_backward(S* dwtt, const S* dout, const int32_t* types, int N, int C);

}  // namespace normlab::ops
