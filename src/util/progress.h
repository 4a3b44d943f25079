// progress.h: how far a long computation is, for the person waiting on a command. The library's long
// loops (the theory's check groups, the instruments' layers and batches) call report_progress; a
// command that runs them installs a ProgressDisplay for its run, which writes the reports to stderr
// with the time elapsed and an estimate of the time left. Without a display (the Python module, the
// tests, a study's runs) a report does nothing.
#pragma once

#include <string_view>

namespace normlab {

// `done` of `total` units of `what` are finished ("theory: 3 of 14 check groups"); `unit` names them.
// Thread-safe. The first report starts the clock of its `what`, which owns the display (reports of
// others, such as the instruments a theory check runs, are ignored) until it reports done = total
// (then a terminal's line is cleared: report it before printing results).
void report_progress(std::string_view what, long done, long total, std::string_view unit);

// While one is alive, reports go to stderr: on a terminal one line rewritten in place, at most ten
// times a second, and cleared when the display ends; otherwise (a log) a line at most every 30 s,
// and none in the first 30 s, so short commands print nothing. The estimate of the time left is the
// time so far per unit times the units left.
class ProgressDisplay {
 public:
  ProgressDisplay();
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;
};

}  // namespace normlab
