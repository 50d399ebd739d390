// `ced tokenize`: text -> token ids (or ids -> text with --decode) with a
// Hugging Face tokenizer.json.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/cli/commands.h"
#include "services/cli/flags.h"

namespace ced::cli {
namespace {

constexpr char kWords[] = "tokenize";

// Ids as a JSON array ("[1, 2]") or separated by whitespace and/or commas.
absl::Status ParseIds(const std::string& text, std::vector<int>* ids) {
  std::string body = text;
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && body[first] == '[') {
    nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_array()) {
      return absl::InvalidArgumentError("ids: not a JSON array of integers");
    }
    for (size_t i = 0; i < parsed.size(); ++i) {
      if (!parsed[i].is_number_integer() || parsed[i].get<int64_t>() < INT32_MIN ||
          parsed[i].get<int64_t>() > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("ids[", i, "]: not an integer id"));
      }
      ids->push_back(parsed[i].get<int>());
    }
    return absl::OkStatus();
  }
  for (char& c : body) {
    if (c == ',') c = ' ';
  }
  size_t pos = 0;
  while ((pos = body.find_first_not_of(" \t\r\n", pos)) != std::string::npos) {
    const size_t end = body.find_first_of(" \t\r\n", pos);
    const std::string word = body.substr(pos, end == std::string::npos ? end : end - pos);
    char* stop = nullptr;
    const long value = std::strtol(word.c_str(), &stop, 10);
    if (*stop != '\0' || word.empty() || value < INT32_MIN || value > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("ids: '", word, "' is not an integer id"));
    }
    ids->push_back(static_cast<int>(value));
    pos = end == std::string::npos ? body.size() : end;
  }
  return absl::OkStatus();
}

int Tokenize(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {
      {"tokenizer", "", "tokenizer.json, or a directory holding it (and tokenizer_config.json)"},
      {"text", "", "the text (or, with --decode, the ids); read from stdin when not given"},
      {"json", "", "print a JSON array of ids (with --decode: the text as a JSON string)", true},
      {"add-bos", "", "add the special tokens the tokenizer asks for (BOS where it has one)", true},
      {"decode", "",
       "the reverse: ids (JSON array or whitespace-separated) to text; special "
       "tokens decode to nothing",
       true},
  };
  auto flags = Flags::Parse(specs, args);
  if (!flags.ok()) return Fail(kWords, std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", FormatHelp("ced tokenize --tokenizer FILE [--text T | < stdin] [--json] "
                                 "[--add-bos] [--decode]",
                                 "Prints the token ids of a text (space-separated, or a JSON "
                                 "array with --json), or with --decode the text of token ids. "
                                 "Ill-formed UTF-8 input is read as U+FFFD.",
                                 specs)
                          .c_str());
    return 0;
  }
  std::string path = flags->Get("tokenizer");
  if (path.empty()) return Fail(kWords, "--tokenizer is required", 2);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    path = (std::filesystem::path(path) / "tokenizer.json").string();
  auto tokenizer = HfTokenizer::Create({path, "", 0});
  if (!tokenizer.ok()) return Fail(kWords, std::string(tokenizer.status().message()));
  std::string input;
  if (flags->Has("text")) {
    input = flags->Get("text");
  } else {
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  const bool json = flags->GetBool("json");
  if (flags->GetBool("decode")) {
    std::vector<int> ids;
    if (absl::Status s = ParseIds(input, &ids); !s.ok())
      return Fail(kWords, std::string(s.message()), 2);
    if (absl::Status s = (*tokenizer)->ValidateIds(ids); !s.ok()) {
      return Fail(kWords, std::string(s.message()), 2);
    }
    const std::string text = (*tokenizer)->Decode(ids);
    if (json) {
      std::printf("%s\n", nlohmann::json(text).dump().c_str());
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return 0;
  }
  const std::vector<int> ids = (*tokenizer)->Encode(input, flags->GetBool("add-bos"));
  std::printf("%s\n", json ? absl::StrCat("[", absl::StrJoin(ids, ","), "]").c_str()
                           : absl::StrJoin(ids, " ").c_str());
  return 0;
}

}  // namespace

void AddTokenizeCommand(std::vector<Command>* commands) {
  commands->push_back(
      {"tokenize", "token ids of a text (or --decode) with a tokenizer.json", Tokenize});
}

}  // namespace ced::cli
