// parallel.h: reading a parallel (translation) corpus: two UTF-8 text files, one sentence a line,
// line k of the source aligned with line k of the target -- the layout `normlab corpus bible`
// writes (<dir>/{train,valid,test}.{src,tgt}, bible.h) and most MT corpora use.
//
// Every problem is an Error with one line naming the file(s): a missing file, sides with different
// numbers of lines (both files and both counts), a file with no lines, an empty line (line
// number), invalid UTF-8 (file, line and byte offset).
#pragma once

#include <string>
#include <vector>

namespace normlab {

struct ParallelCorpus {
  std::vector<std::string> src, tgt;  // aligned: src[k] translates to tgt[k]
  std::string src_path, tgt_path;     // where they were read from
  size_t size() const { return src.size(); }
};

// How read_text_lines treats a line with no characters.
enum class EmptyLines { reject, allow };

// The lines of a UTF-8 text file, split on '\n' only; a final '\n' ends the last line rather than
// starting an empty one, and a '\r' before a '\n' is dropped. With EmptyLines::reject an empty line
// is an Error. Always an Error: a missing file, invalid UTF-8 (naming the line), no lines at all.
std::vector<std::string> read_text_lines(const std::string& path,
                                         EmptyLines empty = EmptyLines::reject);

// Two aligned files, e.g. load_parallel("train.src", "train.tgt").
ParallelCorpus load_parallel(const std::string& src_path, const std::string& tgt_path);

// One split of a corpus directory: <dir>/<split>.src and <dir>/<split>.tgt, where split is
// "train", "valid" or "test" (anything else is an Error), e.g.
// load_parallel_split(bible::default_corpus_root() + "/es-en", "valid").
ParallelCorpus load_parallel_split(const std::string& dir, const std::string& split);

}  // namespace normlab
