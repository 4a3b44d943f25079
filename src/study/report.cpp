// report.cpp: assembling report.html from its parts.
#include "study/report.h"

#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "util/error.h"
#include "util/files.h"
#include "util/resources.h"

namespace normlab::study {

namespace {

std::string read_asset(const std::string& relative) {
  const std::string path = resource_path(relative);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("report asset '{}' is missing (normlab's own files are incomplete: the clone it was "
                            "built from, or an installed module's normlab/resources)", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Replaces the one occurrence of `marker` (an Error if it is not exactly once: a broken template).
void fill(std::string& page, const std::string& marker, const std::string& text) {
  const auto at = page.find(marker);
  if (at == std::string::npos || page.find(marker, at + 1) != std::string::npos)
    throw Error(fmt::format("report template: marker {} must occur exactly once", marker));
  page.replace(at, marker.size(), text);
}

// Text safe inside <script>: no "</" can close the element early.
std::string script_safe(std::string s) {
  for (size_t at = s.find("</"); at != std::string::npos; at = s.find("</", at + 3)) s.replace(at, 2, "<\\/");
  return s;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// report.js with its parts: each /*NORMLAB:PART name*/ marker replaced by report/<name>, a fragment
// that runs inside report.js's function (report_encdec.js, report_layers.js)
std::string report_script() {
  std::string js = read_asset("report/report.js");
  const std::string open = "/*NORMLAB:PART ";
  for (size_t at = js.find(open); at != std::string::npos; at = js.find(open, at)) {
    const size_t end = js.find("*/", at);
    if (end == std::string::npos) throw Error("report template: an unterminated NORMLAB:PART marker in report.js");
    const std::string part = read_asset("report/" + js.substr(at + open.size(), end - at - open.size()));
    js.replace(at, end + 2 - at, part);
    at += part.size();
  }
  return js;
}

}  // namespace

std::string report_page(const nlohmann::json& results) {
  std::string page = read_asset("report/report.html");
  const std::string chartjs = read_asset("third_party/chart.js/chart.umd.min.js");
  if (chartjs.find("</script") != std::string::npos) throw Error("vendored Chart.js contains </script");
  // JSON: every '<' is inside a string, where \u003c means the same
  std::string data = results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (size_t at = data.find('<'); at != std::string::npos; at = data.find('<', at)) data.replace(at, 1, "\\u003c");
  fill(page, "<!--NORMLAB:TITLE-->", html_escape(results["study"].value("title", "normlab study")));
  fill(page, "/*NORMLAB:STYLE*/", read_asset("report/report.css"));
  fill(page, "/*NORMLAB:SCRIPT*/", script_safe(report_script()));
  fill(page, "/*NORMLAB:CHARTJS*/", chartjs);
  fill(page, "/*NORMLAB:DATA*/", data);  // last: the data may contain any text
  return page;
}

void write_report(const nlohmann::json& results, const std::filesystem::path& path) {
  write_file_atomic(path.string(), report_page(results));
}

}  // namespace normlab::study
