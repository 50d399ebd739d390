// libFuzzer harness for the safetensors reader (SafetensorsFile::FromBytes):
// any bytes as a whole file. Every tensor of an accepted file must lie inside
// the data section with a byte size matching its dtype and shape, and reading
// it (RawBytes, DirectF32, ReadF32) must stay inside the input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = ced::SafetensorsFile::FromBytes(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  if (!file.ok()) {
    FUZZ_CHECK(!file.status().message().empty());
    return 0;
  }
  const ced::SafetensorsFile& f = **file;
  FUZZ_CHECK(f.file_size() == size);
  std::vector<float> values;
  for (const ced::SafetensorsEntry& entry : f.tensors()) {
    FUZZ_CHECK(f.Find(entry.name) == &entry);
    FUZZ_CHECK(entry.begin <= entry.end && entry.end <= size);
    auto raw = f.RawBytes(entry.name);
    FUZZ_CHECK(raw.ok());
    FUZZ_CHECK(raw->size() == entry.end - entry.begin);
    if (!entry.type.has_value()) {
      FUZZ_CHECK(!f.ReadF32(entry.name, nullptr, entry.num_elements).ok());
      continue;
    }
    FUZZ_CHECK(static_cast<uint64_t>(entry.num_elements) * ced::StDtypeSize(*entry.type) ==
               raw->size());
    values.assign(static_cast<size_t>(entry.num_elements), 0.0f);
    FUZZ_CHECK(f.ReadF32(entry.name, values.data(), entry.num_elements).ok());
    if (const float* direct = f.DirectF32(entry)) {
      for (int64_t i = 0; i < entry.num_elements; ++i) {
        // Bitwise: NaN payloads must come through unchanged too.
        FUZZ_CHECK(std::memcmp(&direct[i], &values[static_cast<size_t>(i)], sizeof(float)) == 0);
      }
    }
  }
  return 0;
}
