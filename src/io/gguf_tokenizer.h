// gguf_tokenizer.h: the tokenizer of a GGUF file, from its tokenizer.ggml.* metadata (what
// load_tokenizer reads when given a .gguf file).
#pragma once

#include "io/gguf.h"
#include "io/pipeline.h"

namespace normlab::gguf {

// The tokenizer the metadata holds (tokenizer.ggml.*): model "gpt2" (byte-level BPE: tokens,
// merges, the pre-tokenizer named by tokenizer.ggml.pre: "gpt-2" or "smollm") or "llama"
// (SentencePiece BPE: tokens, scores, byte tokens, add_space_prefix; spm.h), its control tokens
// as special added tokens, add_bos / add_eos. Error naming anything else.
TokenizerParts tokenizer_parts(const File& f);

}  // namespace normlab::gguf
