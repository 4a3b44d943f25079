// report.h: report.html, a single self-contained file (opens from file:// with no network): the
// page template, its script and style (report/ in the source tree), the vendored Chart.js
// (third_party/chart.js) and the study's results.json, all inlined.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace normlab::study {

// The page's text (built whole before anything is written, so a failure changes no file).
std::string report_page(const nlohmann::json& results);
void write_report(const nlohmann::json& results, const std::filesystem::path& path);

}  // namespace normlab::study
