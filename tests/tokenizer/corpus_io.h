// Reading the tokenizer comparison corpus (make_corpus.py) and the
// reference's output (reference_tokenize.mjs). Shared by the reference test
// and bench/tokenizer.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ced::testing {

// The documents of a corpus file; false when it cannot be read or parsed.
inline bool ReadCorpus(const std::string& path, std::vector<std::string>* docs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  size_t pos = 0;
  auto number = [&](long* value) {
    const size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) return false;
    *value = std::strtol(data.c_str() + pos, nullptr, 10);
    pos = nl + 1;
    return *value >= 0;
  };
  long count = 0;
  if (!number(&count)) return false;
  docs->clear();
  for (long i = 0; i < count; ++i) {
    long n = 0;
    if (!number(&n) || pos + n + 1 > data.size()) return false;
    docs->push_back(data.substr(pos, n));
    pos += n + 1;
  }
  return true;
}

struct ReferenceDoc {
  std::vector<int> ids;
  std::string decoded;
};

// The reference's ids and decoded text per document.
inline bool ReadReference(const std::string& path, std::vector<ReferenceDoc>* docs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string line;
  if (!std::getline(in, line)) return false;
  const long count = std::strtol(line.c_str(), nullptr, 10);
  docs->clear();
  for (long i = 0; i < count; ++i) {
    ReferenceDoc doc;
    if (!std::getline(in, line)) return false;
    std::istringstream ids(line);
    for (int id; ids >> id;) doc.ids.push_back(id);
    if (!std::getline(in, line)) return false;
    const long n = std::strtol(line.c_str(), nullptr, 10);
    doc.decoded.resize(n);
    if (n > 0 && !in.read(doc.decoded.data(), n)) return false;
    in.get();  // the newline after the bytes
    docs->push_back(std::move(doc));
  }
  return true;
}

}  // namespace ced::testing
