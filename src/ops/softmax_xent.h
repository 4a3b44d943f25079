// softmax_xent.h: softmax cross-entropy over the rows of the logits of the tied output embedding,
// fused with its backward, which turns the logits buffer into dlogits in place (no second (N, V)
// buffer: the one exception to the += convention of ops/common.h).
// Labels: an int32 per row, kIgnoreLabel (-100) meaning no loss at this row.
// Label smoothing eps (PyTorch's CrossEntropyLoss(label_smoothing=eps)): the target is
// (1 - eps) onehot(label) + eps / V, so a row's loss is (1 - eps)(-log p[label]) + eps mean_v(-log p[v])
// = lse - (1 - eps) z[label] - eps mean_v z[v]; eps = 0 is plain cross-entropy.
// z-loss zeta (PaLM; Wortsman et al. 2023): each labelled row's loss gains zeta lse^2 (lse = log Z, the
// log of the softmax's normalizer), which pulls log Z toward 0; its gradient is 2 zeta lse softmax.
#pragma once

#include <cstddef>
#include <cstdint>

namespace normlab::ops {

// Saves lse (N) = logsumexp of each row (stable); returns the SUM of -log p[label] over labelled
// rows (double), and writes the number of labelled rows to *count. Labels must be in [0, V) or
// kIgnoreLabel (checked at the API boundary, not here). With smoothing > 0 the sum is of the
// smoothed row losses; with z_loss > 0 each labelled row adds z_loss lse^2.
template <class S>
double softmax_xent_forward(S* lse, const S* logits, const int32_t* labels, int N, int V,
                            int64_t* count, double smoothing = 0.0, double z_loss = 0.0);

// In place: logits (N, V) becomes dlogits = scale * (softmax - target), target = (1 - smoothing)
// onehot(label) + smoothing / V; rows without a label become 0. scale is d(loss)/d(sum of row
// losses), e.g. 1 / count. softcap > 0: the logits given are y = softcap tanh(z / softcap) (the
// model's logit_softcap), and the result is d(loss)/dz. z_loss > 0: softmax is weighted by
// 1 + 2 z_loss lse (the z-loss term's gradient).
template <class S>
void softmax_xent_backward(S* logits_to_dlogits, const S* lse, const int32_t* labels, double scale,
                           int N, int V, double softcap = 0.0, double smoothing = 0.0, double z_loss = 0.0);

// x (n) <- c tanh(x / c), in place (c > 0)
template <class S>
void softcap_in_place(S* x, size_t n, double c);

}  // namespace normlab::ops
