// translation.cpp: parallel-corpus batches and validation BLEU (translation.h).
#include "train/translation.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>

#include "eval/bleu.h"
#include "io/bible.h"
#include "io/parallel.h"
#include "model/decode.h"
#include "ops/common.h"
#include "util/error.h"

namespace normlab {

namespace {

std::vector<int32_t> byte_ids(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

// Keeps the pairs that fit seq_len; returns how many were left out.
size_t fit(const ParallelCorpus& corpus, int seq_len, std::vector<TokenPair>& out,
           std::vector<std::string>* src_text, std::vector<std::string>* ref_text) {
  size_t dropped = 0;
  for (size_t k = 0; k < corpus.size(); k++) {
    TokenPair p{source_ids(corpus.src[k]), byte_ids(corpus.tgt[k])};
    if (int(p.src.size()) > seq_len || int(p.tgt.size()) + 1 > seq_len) {
      dropped++;
      continue;
    }
    if (src_text) src_text->push_back(corpus.src[k]);
    if (ref_text) ref_text->push_back(corpus.tgt[k]);
    out.push_back(std::move(p));
  }
  return dropped;
}

}  // namespace

std::vector<int32_t> source_ids(const std::string& text) {
  std::vector<int32_t> ids = byte_ids(text);
  ids.push_back(kEosToken);
  return ids;
}

std::string target_text(const std::vector<int32_t>& ids) {
  std::string bytes;
  for (int32_t id : ids)
    if (id >= 0 && id < 256) bytes.push_back(char(id));
  // a byte model may emit a broken UTF-8 sequence: keep the well-formed ones only
  std::string s;
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = bytes[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= bytes.size();
    for (size_t k = 1; ok && k < n; k++) ok = (static_cast<unsigned char>(bytes[i + k]) >> 6) == 2;
    if (ok) s.append(bytes, i, n);
    i += ok ? n : 1;
  }
  return s;
}

TranslationData load_translation(const std::string& where, int seq_len) {
  TranslationData d;
  d.dir = where;
  if (!std::filesystem::is_directory(where)) {
    const std::string named = bible::default_corpus_root() + "/" + where;
    if (where.find('/') != std::string::npos || !std::filesystem::is_directory(named))
      throw Error(fmt::format("data.parallel '{}' is neither a corpus directory ({{train,valid}}.{{src,tgt}}) "
                              "nor a built Bible pair (es-en, web-kjv under {}; `normlab corpus bible` builds "
                              "them)",
                              where, bible::default_corpus_root()));
    d.dir = named;
  }
  const ParallelCorpus train = load_parallel_split(d.dir, "train");
  const ParallelCorpus valid = load_parallel_split(d.dir, "valid");
  d.dropped_train = fit(train, seq_len, d.train, nullptr, nullptr);
  d.dropped_valid = fit(valid, seq_len, d.valid, &d.valid_src, &d.valid_ref);
  if (d.train.empty() || d.valid.empty())
    throw Error(fmt::format("data.parallel '{}': no {} pair fits model.seq_len = {} (source + EOS and BOS + "
                            "target, in bytes)",
                            d.dir, d.train.empty() ? "training" : "validation", seq_len));
  return d;
}

Batch translation_batch(const std::vector<TokenPair>& pairs, size_t first, int B) {
  std::vector<const TokenPair*> rows;
  for (int b = 0; b < B; b++) rows.push_back(&pairs[(first + size_t(b)) % pairs.size()]);
  Batch batch;
  batch.B = B;
  for (const TokenPair* p : rows) {
    batch.S = std::max(batch.S, int(p->src.size()));
    batch.T = std::max(batch.T, int(p->tgt.size()) + 1);
  }
  const size_t NS = size_t(B) * batch.S, NT = size_t(B) * batch.T;
  batch.src.assign(NS, 0);
  batch.src_mask.assign(NS, 0);
  batch.ids.assign(NT, 0);
  batch.labels.assign(NT, ops::kIgnoreLabel);
  batch.mask.assign(NT, 0);
  for (int b = 0; b < B; b++) {
    const TokenPair& p = *rows[size_t(b)];
    for (size_t s = 0; s < p.src.size(); s++) {
      batch.src[size_t(b) * batch.S + s] = p.src[s];
      batch.src_mask[size_t(b) * batch.S + s] = 1;
    }
    // decoder input BOS y_1 .. y_n; labels y_1 .. y_n EOS
    for (size_t t = 0; t <= p.tgt.size(); t++) {
      batch.ids[size_t(b) * batch.T + t] = t == 0 ? kBosToken : p.tgt[t - 1];
      batch.labels[size_t(b) * batch.T + t] = t < p.tgt.size() ? p.tgt[t] : kEosToken;
      batch.mask[size_t(b) * batch.T + t] = 1;
    }
  }
  return batch;
}

Batch sample_translation_batch(const std::vector<TokenPair>& pairs, int B, Rng& rng) {
  std::vector<TokenPair> picked;
  for (int b = 0; b < B; b++) picked.push_back(pairs[rng.below(pairs.size())]);
  return translation_batch(picked, 0, B);
}

BleuResult validation_bleu(Model<float>& model, const TranslationData& data, int n, int beam) {
  n = std::min<int>(n, int(data.valid.size()));
  std::vector<std::vector<int32_t>> sources;
  for (int k = 0; k < n; k++) sources.push_back(data.valid[size_t(k)].src);
  DecodeOptions options;
  options.beam = beam;
  const auto outputs = translate(model, sources, options);
  std::vector<std::string> hyps, refs(data.valid_ref.begin(), data.valid_ref.begin() + n);
  for (const auto& ids : outputs) hyps.push_back(target_text(ids));
  const bleu::Score s = bleu::corpus_bleu(hyps, refs);
  return {s.score, n, s.verbose()};
}

}  // namespace normlab
