// resources.cpp: the resource directory (util/resources.h).
#include "util/resources.h"

namespace normlab {

namespace {
std::string& dir_now() {
  static std::string dir = NORMLAB_SOURCE_DIR;
  return dir;
}
}  // namespace

std::string resource_path(const std::string& relative) { return dir_now() + "/" + relative; }
void set_resource_dir(const std::string& dir) { dir_now() = dir; }
const std::string& resource_dir() { return dir_now(); }

}  // namespace normlab
