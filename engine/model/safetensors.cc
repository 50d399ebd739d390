#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/json_limits.h"
#include "kernels/cpu/kv_codec.h"
#include "nlohmann/json.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

namespace ced {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's own limit
constexpr int kMaxJsonDepth = 16;                  // a valid header nests 3 deep
constexpr size_t kMaxRank = 8;
constexpr size_t kMaxNameInMessage = 200;
constexpr uint64_t kDataAlignment = 64;

// Element size of every dtype the format defines; 0 when unknown.
// absl::string_view is not std::string_view in every absl build.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

size_t AnyDtypeSize(std::string_view name) {
  static constexpr std::pair<std::string_view, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"U64", 8}, {"I32", 4}, {"U32", 4},  {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [n, s] : kSizes) {
    if (n == name) return s;
  }
  return 0;
}

std::string Quote(std::string_view name) {
  std::string s = absl::CHexEscape(Sv(name.substr(0, kMaxNameInMessage)));
  if (name.size() > kMaxNameInMessage) s += "...";
  return absl::StrCat("'", s, "'");
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> AsUint(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  return std::nullopt;
}

const std::array<float, 65536>& Fp16Table() {
  static const auto* table = [] {
    auto* t = new std::array<float, 65536>;
    for (uint32_t i = 0; i < 65536; ++i) (*t)[i] = kernels::Fp16ToFloat(static_cast<uint16_t>(i));
    return t;
  }();
  return *table;
}

}  // namespace

std::string_view StDtypeName(StDtype dtype) {
  switch (dtype) {
    case StDtype::kF32:
      return "F32";
    case StDtype::kBF16:
      return "BF16";
    case StDtype::kF16:
      return "F16";
  }
  return "?";
}

size_t StDtypeSize(StDtype dtype) { return dtype == StDtype::kF32 ? 4 : 2; }

bool ParseStDtype(std::string_view name, StDtype* out) {
  for (StDtype d : {StDtype::kF32, StDtype::kBF16, StDtype::kF16}) {
    if (name == StDtypeName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ >= 8) {
    void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    file->map_ = map;
    file->base_ = static_cast<const uint8_t*>(map);
  }
  ::close(fd);
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string bytes,
                                                                            std::string label) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(label);
  file->owned_ = std::move(bytes);
  file->base_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

absl::Status SafetensorsFile::Parse() {
  auto error = [this](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", Sv(what)));
  };
  if (size_ < 8) {
    return error(absl::StrCat("file is ", size_, " bytes, too short for the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
  if (n > size_ - 8) {
    return error(
        absl::StrCat("header length ", n, " runs past the end of the file (", size_, " bytes)"));
  }
  if (n > kMaxHeaderBytes) {
    return error(absl::StrCat("header length ", n, " exceeds the limit of ", kMaxHeaderBytes));
  }
  data_offset_ = 8 + n;
  const uint64_t data_size = size_ - data_offset_;
  std::string_view text(reinterpret_cast<const char*>(base_ + 8), n);
  if (!model_internal::JsonDepthWithin(text, kMaxJsonDepth))
    return error("header JSON nests too deeply");
  Json header;
  std::set<std::string> top_keys;
  std::string duplicate;
  // JSON objects silently keep the last of two equal keys; a header that
  // names a tensor twice is ambiguous, so refuse it.
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty() &&
        !top_keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  try {
    header = Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::parse_error& e) {
    return error(absl::StrCat("invalid header JSON at byte ", e.byte, ": ", e.what()));
  } catch (const std::exception& e) {
    return error(absl::StrCat("invalid header JSON: ", e.what()));
  }
  if (!header.is_object()) return error("header is not a JSON object");
  if (!duplicate.empty())
    return error(absl::StrCat("tensor ", Quote(duplicate), " is listed twice"));

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return error("__metadata__ is not a JSON object");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          return error(absl::StrCat("__metadata__ key ", Quote(key), " is not a string"));
        }
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    // Init-capture: C++17 lambdas cannot capture a structured binding (clang rejects it).
    auto tensor_error = [&, &tensor = name](std::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": tensor ", Quote(tensor), ": ", Sv(what)));
    };
    if (!value.is_object()) return tensor_error("entry is not a JSON object");
    SafetensorsEntry entry;
    entry.name = name;

    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return tensor_error("missing string 'dtype'");
    entry.dtype = dtype->get<std::string>();
    StDtype st;
    if (ParseStDtype(entry.dtype, &st)) entry.type = st;
    const size_t elem_size = AnyDtypeSize(entry.dtype);

    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) return tensor_error("missing list 'shape'");
    if (shape->size() > kMaxRank) {
      return tensor_error(
          absl::StrCat("shape has rank ", shape->size(), " (limit ", kMaxRank, ")"));
    }
    uint64_t count = 1;
    bool overflow = false, has_zero = false;
    for (const Json& dim : *shape) {
      std::optional<uint64_t> d = AsUint(dim);
      if (!d || *d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return tensor_error(absl::StrCat("shape entry ", dim.dump(), " is not a size"));
      }
      entry.shape.push_back(static_cast<int64_t>(*d));
      has_zero |= *d == 0;
      overflow |= __builtin_mul_overflow(count, *d, &count);
    }
    if (has_zero) count = 0, overflow = false;
    if (overflow || count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return tensor_error(absl::StrCat("shape ", ShapeString(entry.shape), " overflows"));
    }
    entry.num_elements = static_cast<int64_t>(count);

    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !AsUint((*offsets)[0]) || !AsUint((*offsets)[1])) {
      return tensor_error("'data_offsets' is not a list of two byte offsets");
    }
    entry.begin = *AsUint((*offsets)[0]);
    entry.end = *AsUint((*offsets)[1]);
    if (entry.end < entry.begin) {
      return tensor_error(
          absl::StrCat("data_offsets end ", entry.end, " is before begin ", entry.begin));
    }
    if (entry.end > data_size) {
      return tensor_error(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end,
                                       "] run past the end of the data section (", data_size,
                                       " bytes)"));
    }
    uint64_t want_bytes = 0;
    if (elem_size != 0 && (__builtin_mul_overflow(count, elem_size, &want_bytes) ||
                           want_bytes != entry.end - entry.begin)) {
      return tensor_error(absl::StrCat("header lies about sizes: shape ", ShapeString(entry.shape),
                                       " of ", entry.dtype, " needs ", count, " x ", elem_size,
                                       " bytes, data_offsets span ", entry.end - entry.begin));
    }
    entries_.push_back(std::move(entry));
  }
  // File order; the JSON object itself carries no order.
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
  });
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
  return absl::OkStatus();
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<absl::Span<const uint8_t>> SafetensorsFile::RawBytes(std::string_view name) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": tensor ", Quote(name), ": not in the file"));
  }
  return absl::Span<const uint8_t>(base_ + data_offset_ + e->begin, e->end - e->begin);
}

const float* SafetensorsFile::DirectF32(const SafetensorsEntry& entry) const {
  if (entry.type != StDtype::kF32) return nullptr;
  const uint8_t* p = base_ + data_offset_ + entry.begin;
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<const float*>(p);
}

absl::Status SafetensorsFile::ReadF32(std::string_view name, float* dst, int64_t count) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": tensor ", Quote(name), ": not in the file"));
  }
  auto tensor_error = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor ", Quote(name), ": ", Sv(what)));
  };
  if (!e->type) {
    return tensor_error(absl::StrCat("unsupported dtype '", absl::CHexEscape(e->dtype),
                                     "' (expected F32, BF16 or F16)"));
  }
  if (count != e->num_elements) {
    return tensor_error(absl::StrCat("has ", e->num_elements, " elements, caller expects ", count));
  }
  if (count == 0) return absl::OkStatus();
  const uint8_t* src = base_ + data_offset_ + e->begin;
  switch (*e->type) {
    case StDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      break;
    case StDtype::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = kernels::Bf16ToFloat(h);
      }
      break;
    case StDtype::kF16: {
      const auto& table = Fp16Table();
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = table[h];
      }
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    auto bad = [&](std::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", Quote(t.name), ": ", Sv(what)));
    };
    if (t.name.empty() || t.name == "__metadata__") return bad("reserved or empty name");
    if (header.contains(t.name)) return bad("written twice");
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count)) {
        return bad(absl::StrCat("bad shape ", ShapeString(t.shape)));
      }
    }
    if (count * StDtypeSize(t.dtype) != t.bytes.size()) {
      return bad(absl::StrCat("shape ", ShapeString(t.shape), " of ", Sv(StDtypeName(t.dtype)),
                              " needs ", count * StDtypeSize(t.dtype), " bytes, got ",
                              t.bytes.size()));
    }
    header[t.name] = {{"dtype", StDtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while ((8 + text.size()) % kDataAlignment != 0) text.push_back(' ');

  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter++);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  bool ok =
      std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const TensorToWrite& t : tensors) {
    if (!ok) break;
    ok = t.bytes.empty() || std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  }
  ok = std::fflush(f) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace ced
