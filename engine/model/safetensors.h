// Reader and writer for the safetensors format:
//   [8-byte little-endian header length N][N bytes of JSON header][data section]
// The header maps tensor names to {dtype, shape, data_offsets: [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__"
// object of string values.
//
// The reader validates the whole header up front and never trusts a number
// from it: hostile bytes yield an error Status, never a crash or an
// allocation sized by the header. Error messages read
// "<path>: tensor '<name>': <what>" or "<path>: <what>".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ced {

// Element types this project reads and writes.
enum class StDtype : uint8_t { kF32, kBF16, kF16 };
// "F32", "BF16", "F16" (the header spelling).
std::string_view StDtypeName(StDtype dtype);
// Bytes per element: 4, 2, 2.
size_t StDtypeSize(StDtype dtype);
// Returns false when `name` is not one of the three names above.
bool ParseStDtype(std::string_view name, StDtype* out);

// One tensor as the header describes it (already validated).
struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as written in the header, e.g. "F32", "I64"
  std::optional<StDtype> type;  // set when dtype is one we can read
  std::vector<int64_t> shape;   // empty for a scalar
  int64_t num_elements = 0;     // product of shape
  uint64_t begin = 0;           // byte range in the data section
  uint64_t end = 0;
};

// An open safetensors file (read-only memory map) or an in-memory copy.
// Immutable after creation; all methods are const and thread-safe. Pointers
// and spans it returns stay valid for its lifetime. The file must not be
// truncated or rewritten in place while open (replacing it by rename, as
// WriteSafetensors does, is safe).
class SafetensorsFile {
 public:
  // Memory-maps `path` and validates its header.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Same validation over bytes held in memory; `label` stands for the path
  // in error messages. For tests and fuzzing.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string bytes,
                                                                    std::string label);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Entries in header order.
  const std::vector<SafetensorsEntry>& tensors() const { return entries_; }
  // Null when there is no tensor of that name.
  const SafetensorsEntry* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Total size of the file in bytes.
  uint64_t file_size() const { return size_; }

  // The raw bytes of a tensor (any dtype). Error when the name is absent.
  absl::StatusOr<absl::Span<const uint8_t>> RawBytes(std::string_view name) const;
  // The tensor's values straight from the file when its dtype is F32 and its
  // address is 4-byte aligned; null otherwise (then use ReadF32).
  const float* DirectF32(const SafetensorsEntry& entry) const;
  // Converts a F32/BF16/F16 tensor into `dst`, which must hold exactly
  // `count` == num_elements floats. Errors: absent name, other dtypes, count.
  absl::Status ReadF32(std::string_view name, float* dst, int64_t count) const;

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;  // whole file
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;  // 8 + N
  void* map_ = nullptr;       // non-null when memory-mapped
  std::string owned_;         // backing store for FromBytes
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write. `bytes` holds product(shape) * StDtypeSize(dtype) bytes,
// row-major, little-endian.
struct TensorToWrite {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes `tensors` (data laid out in the given order) to `path` through a
// temporary file in the same directory and a rename, so readers never see a
// partial file (the data is not fsync'ed). The header is padded with spaces
// so that the data section starts at a 64-byte boundary. Names must be
// unique, non-empty and not "__metadata__"; byte sizes must match the shapes.
// `metadata` becomes the "__metadata__" object when not empty.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace ced
