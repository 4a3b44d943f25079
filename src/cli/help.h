// help.h: the CLI teaching itself: `normlab help [CMD [SUBCMD]]`, "did you mean" for a misspelt
// command or option, and the one exit code (1) for every command-line error that CLI11 reports
// (CLI11's own codes are 100 and up).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace normlab::cli {

// `normlab help WORDS...`: the help of the command WORDS names (the overview when empty). Registers
// the subcommand; run_help prints it (exit 0) or names an unknown command (Error, exit 1).
struct HelpCommand {
  CLI::App* help = nullptr;
  std::vector<std::string> words;
};
void add_help_command(CLI::App& app, HelpCommand& cmd);
int run_help(const CLI::App& app, const HelpCommand& cmd);

// Checks the leading words of the command line (those before the first option) against the
// subcommands: an unknown one gives its message with the nearest command ("unknown command 'trian';
// did you mean 'train'?"); nullopt when they are all known.
std::optional<std::string> unknown_command(const CLI::App& app, int argc, const char* const* argv);

// What CLI11 threw while parsing, as the exit code docs/USAGE.md documents ("Exit codes"): help and version requests
// print and return 0; every other error prints "normlab: error: ..." (an unknown option with the
// nearest option of that command) and returns 1.
int parse_error_exit(CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv);

}  // namespace normlab::cli
