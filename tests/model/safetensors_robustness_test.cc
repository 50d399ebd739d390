// Hostile bytes must give an error Status (or a valid file), never a crash,
// an out-of-range read or a huge allocation. Run under ASan/UBSan
// (-DCED_SANITIZE=address,undefined) for the full effect.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

constexpr char kLabel[] = "fuzz.safetensors";

class Prng {
 public:
  explicit Prng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t s_;
};

std::string WithLength(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  return s + header + data;
}

std::string ValidImage() {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
                             R"("c":{"dtype":"F16","shape":[2,2],"data_offsets":[32,40]},)"
                             R"("d":{"dtype":"I64","shape":[1],"data_offsets":[40,48]},)"
                             R"("e":{"dtype":"F32","shape":[],"data_offsets":[44,48]}})";
  std::string data(48, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
  return WithLength(header, data);
}

// Opens the image and, when valid, reads every tensor it claims to have.
// Returns true when the image was accepted.
bool Exercise(const std::string& image) {
  auto f = SafetensorsFile::FromBytes(image, kLabel);
  if (!f.ok()) {
    EXPECT_EQ(std::string(f.status().message()).rfind(kLabel, 0), 0u) << f.status();
    return false;
  }
  for (const SafetensorsEntry& e : (*f)->tensors()) {
    auto raw = (*f)->RawBytes(e.name);
    EXPECT_TRUE(raw.ok());
    EXPECT_LE(e.end, image.size());
    if (raw.ok()) {
      EXPECT_EQ(raw->size(), e.end - e.begin);
    }
    if (!e.type) {
      float dummy;
      EXPECT_FALSE((*f)->ReadF32(e.name, &dummy, 1).ok());
      continue;
    }
    // Validated: the elements fit in the image, so this allocation is bounded.
    EXPECT_LE(static_cast<uint64_t>(e.num_elements), image.size());
    std::vector<float> out(static_cast<size_t>(e.num_elements));
    EXPECT_TRUE((*f)->ReadF32(e.name, out.data(), e.num_elements).ok());
    if (const float* p = (*f)->DirectF32(e)) {
      volatile float sink = e.num_elements > 0 ? p[e.num_elements - 1] : 0.0f;
      (void)sink;
    }
  }
  return true;
}

TEST(SafetensorsRobustnessTest, RandomBytes) {
  Prng rng(1);
  int accepted = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s(rng.Below(256), '\0');
    for (char& c : s) c = static_cast<char>(rng.Next());
    if (s.size() >= 8 && rng.Below(2) == 0) {  // a plausible header length
      const uint64_t n = rng.Below(s.size() - 7);
      for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
      if (n > 0 && rng.Below(2) == 0) s[8] = '{';
    }
    accepted += Exercise(s);
  }
  // Random bytes are almost never a valid header ("{}" with spaces is).
  EXPECT_LT(accepted, 50);
}

TEST(SafetensorsRobustnessTest, MutatedHeaders) {
  const std::string valid = ValidImage();
  ASSERT_TRUE(Exercise(valid));
  const std::string alphabet = "0123456789-+.eE,:[]{}\" \\xIFBU";
  Prng rng(2);
  int rejected = 0;
  const int iters = 4000;
  for (int iter = 0; iter < iters; ++iter) {
    std::string s = valid;
    const size_t header_end = valid.size() - 48;
    const int edits = 1 + static_cast<int>(rng.Below(3));
    for (int k = 0; k < edits; ++k) {
      switch (rng.Below(6)) {
        case 0:  // a random byte in the header
          s[8 + rng.Below(header_end - 8)] = static_cast<char>(rng.Next());
          break;
        case 1:  // a syntax character in the header
          s[8 + rng.Below(header_end - 8)] = alphabet[rng.Below(alphabet.size())];
          break;
        case 2:  // truncate anywhere
          s.resize(rng.Below(s.size() + 1));
          break;
        case 3:  // a corrupt length prefix
          s[rng.Below(8)] = static_cast<char>(rng.Next());
          break;
        case 4: {  // grow a number into something huge or negative
          size_t pos = s.find_first_of("0123456789", 8 + rng.Below(header_end - 8));
          if (pos != std::string::npos && pos < s.size()) {
            static const char* kNumbers[] = {"18446744073709551615", "-1",         "1e300",
                                             "9223372036854775807",  "4294967296", "0.5"};
            s.insert(pos, kNumbers[rng.Below(6)]);
          }
          break;
        }
        default:  // swap two header bytes
          if (s.size() > 10)
            std::swap(s[8 + rng.Below(s.size() - 8)], s[8 + rng.Below(s.size() - 8)]);
      }
    }
    rejected += !Exercise(s);
  }
  // Most mutations break something; some (like swapping equal bytes) do not.
  EXPECT_GT(rejected, iters / 2);
}

TEST(SafetensorsRobustnessTest, HostileHeaders) {
  const std::vector<std::string> headers = {
      "",
      "{}",
      "null",
      std::string(5000, '['),
      std::string(5000, '{'),
      R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,0]}})",
      R"({"a":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]}})",
      R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,1e30]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
      R"({"a":{"dtype":"F32","shape":{"x":1},"data_offsets":[0,4]}})",
      R"({"a":{"dtype":["F32"],"shape":[1],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      R"({"__metadata__":"x"})",
      R"({"__metadata__":{"k":{"nested":1}}})",
      "{\"a\xff\xfe\":{}}",
      "{\"a\":1}\x00\x00",
  };
  for (const std::string& h : headers) {
    Exercise(WithLength(h, std::string(8, '\0')));
    Exercise(WithLength(h, ""));
  }
  EXPECT_TRUE(Exercise(WithLength("{}   ", "")));
}

}  // namespace
}  // namespace ced
