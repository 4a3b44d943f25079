// hints.h: the help a user error carries: the nearest valid name for a misspelt one ("did you mean
// 'train'?") and what a directory holds when a file was expected ("runs/x is a run directory; its
// config is runs/x/config.json"). Every strict reader and the CLI use these, so the suggestions read
// the same everywhere.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace normlab {

// Edit distance counting insertions, deletions, substitutions and swaps of two neighbours as one
// each (optimal string alignment, on bytes): the typos people make.
int edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` by edit distance, if it is close: distance <= max(1, |word| / 3)
// (so "trian" -> "train", "colour" -> none among model keys); ties go to the first candidate.
std::optional<std::string> nearest_name(const std::string& word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" when a candidate is close, else "": appended to an "unknown ..." message.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// For a path that names a directory where a file was expected: "'p' is a directory" plus what it
// holds when that helps (a normlab run directory, a study directory, a Hugging Face model directory,
// else its first few entries). "" when the path is not a directory.
std::string directory_hint(const std::string& path);

// Error "<what> '<path>': <directory_hint>" when the path is a directory, and an Error naming the
// kind when it is a FIFO, socket or device (require_regular_file in util/files.h: opening one would
// block); nothing otherwise (a missing file is left to the reader, which names it).
void require_not_directory(const std::string& path, const std::string& what);

}  // namespace normlab
