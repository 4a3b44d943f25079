// resources.h: where normlab's own files are read from: the built-in corpus (data/), the GPT-2
// vocabulary and Chart.js (third_party/), the built-in studies (studies/), the report's page
// (report/) and the model fetcher (scripts/fetch_model.sh). By default the source tree normlab was
// built from; a Python wheel carries them in normlab/resources/ and the module points here at it
// when it is imported (python/normlab/__init__.py), so an installed module needs no clone.
#pragma once

#include <string>

namespace normlab {

// dir / relative, dir the resource directory ("data/kjv.txt" -> "/src/normlab/data/kjv.txt").
std::string resource_path(const std::string& relative);
// Every later resource_path reads from dir (called once, before anything reads a resource).
void set_resource_dir(const std::string& dir);
const std::string& resource_dir();

}  // namespace normlab
