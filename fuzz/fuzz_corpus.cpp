// fuzz_corpus.cpp: libFuzzer harness of the corpus readers: a text corpus (data.corpus, read as
// bytes by load_corpus), a parallel corpus (data.parallel: <dir>/train.src and train.tgt, line k
// aligned with line k; io/parallel.h) and the SWORD module text the Bible corpus is built from
// (mod2imp output and each verse's OSIS markup; io/sword.h). The input up to the first NUL is the
// text corpus, the source side and the mod2imp text; what follows it (up to the next NUL) the target
// side.
#include <filesystem>

#include "fuzz/fuzz_util.h"
#include "io/parallel.h"
#include "io/sword.h"
#include "train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  const std::vector<std::string> parts = fuzz::split_at_nul(data, size);
  const std::string& first = parts[0];
  const std::string second = parts.size() > 1 ? parts[1] : "";
  const std::string text = fuzz::write_scratch("corpus.txt", first);
  fuzz::expect_clean([&] {
    const Corpus c = load_corpus(text, 0.1, 8);
    unigram_entropy(c.train);
    Rng rng(1);
    sample_batch(c.train, Arch::Encoder, 2, 8, rng);
  });

  static const bool made = std::filesystem::create_directories(fuzz::scratch_dir() + "/parallel");
  (void)made;
  fuzz::write_scratch("parallel/train.src", first);
  fuzz::write_scratch("parallel/train.tgt", second);
  fuzz::expect_clean([&] { load_parallel_split(fuzz::scratch_dir() + "/parallel", "train"); });

  fuzz::expect_clean([&] {
    for (const sword::Verse& v : sword::parse_imp(first, "fuzz mod2imp")) {
      v.ref();
      sword::read_osis(v.markup, "fuzz " + v.ref());
    }
  });
  fuzz::expect_clean([&] { sword::read_osis(second, "fuzz osis"); });
  return 0;
}
