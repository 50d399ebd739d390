// The `ced` subcommands. Each takes the arguments after its command words
// and returns the process exit code (0 ok, 1 runtime error, 2 usage error).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ced::cli {

struct Command {
  std::string words;    // e.g. "model make"
  std::string summary;  // one line for `ced --help`
  std::function<int(const std::vector<std::string>& args)> run;
};

// Commands built into every `ced` binary.
void AddModelCommands(std::vector<Command>* commands);
void AddGenerateCommand(std::vector<Command>* commands);
void AddTokenizeCommand(std::vector<Command>* commands);
// Commands of the serving system (linked when services are built).
void AddServiceCommands(std::vector<Command>* commands);

// Runs another registered command by its words (e.g. "client generate").
int RunCommand(const std::string& words, const std::vector<std::string>& args);

// Prints "ced <words>: <message>" to stderr and returns `code`.
int Fail(const std::string& words, const std::string& message, int code = 1);

}  // namespace ced::cli
