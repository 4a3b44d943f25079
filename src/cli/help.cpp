// help.cpp: `normlab help`, the unknown-command check and CLI11 parse errors as exit code 1 (help.h).
#include "cli/help.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iostream>

#include "util/error.h"
#include "util/hints.h"

namespace normlab::cli {

namespace {

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : subcommands_of(app))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

// "'jacobain' is not a command of 'normlab analyze' (jacobian, attention, dynamics); did you mean ...?"
std::string unknown_message(const CLI::App& parent, const std::string& path, const std::string& word) {
  std::vector<std::string> names;
  for (const CLI::App* sub : subcommands_of(parent)) names.push_back(sub->get_name());
  return fmt::format("unknown command '{}' for '{}' (commands: {}){}; see '{} --help'", word, path,
                     fmt::join(names, ", "), did_you_mean(word, names), path);
}

// The deepest subcommand that was parsed (the app itself if none).
const CLI::App* deepest_parsed(const CLI::App& app) {
  for (const CLI::App* sub : subcommands_of(app))
    if (sub->parsed()) return deepest_parsed(*sub);
  return &app;
}

std::string command_path(const CLI::App* app) {
  std::string path;
  for (; app; app = app->get_parent()) path = app->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

}  // namespace

void add_help_command(CLI::App& app, HelpCommand& cmd) {
  cmd.help = app.add_subcommand("help", "print a command's help: normlab help train, normlab help analyze jacobian");
  cmd.help->add_option("command", cmd.words, "the command (and subcommand) to explain; none: the overview");
}

int run_help(const CLI::App& app, const HelpCommand& cmd) {
  const CLI::App* at = &app;
  std::string path = app.get_name();
  for (const std::string& word : cmd.words) {
    const CLI::App* sub = find_subcommand(*at, word);
    if (!sub) throw Error(unknown_message(*at, path, word));
    at = sub;
    path += " " + word;
  }
  // the formatter directly: App::help would show the parsed `help` subcommand's own help instead
  std::cout << at->get_formatter()->make_help(at, command_path(at), CLI::AppFormatMode::Normal);
  return 0;
}

std::optional<std::string> unknown_command(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* at = &app;
  std::string path = app.get_name();
  for (int i = 1; i < argc; i++) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-' || subcommands_of(*at).empty()) break;
    const CLI::App* sub = find_subcommand(*at, word);
    if (!sub) return unknown_message(*at, path, word);
    at = sub;
    path += " " + word;
  }
  return std::nullopt;
}

int parse_error_exit(CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all, --version: printed, exit 0
  const CLI::App* at = deepest_parsed(app);
  std::string hint;
  std::vector<std::string> names;  // the options of that command
  for (const CLI::Option* o : at->get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  for (int i = 1; i < argc && hint.empty(); i++) {  // the first option this command does not have
    std::string word = argv[i];
    if (word.size() < 3 || word.compare(0, 2, "--") != 0) continue;  // not "-1", a value
    word = word.substr(0, word.find('='));
    if (std::find(names.begin(), names.end(), word) == names.end() && word != "--" && word.rfind("--help", 0) != 0)
      hint = did_you_mean(word, names);
  }
  std::cerr << fmt::format("normlab: error: {}{} (see '{} --help')\n", e.what(), hint, command_path(at));
  return 1;
}

}  // namespace normlab::cli
