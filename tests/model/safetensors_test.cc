#include "engine/model/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kv_codec.h"
#include "tests/model/test_files.h"

namespace ced {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> HalfBytes(const std::vector<float>& v, bool bf16) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = bf16 ? kernels::FloatToBf16(v[i]) : kernels::FloatToFp16(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

// A file image: 8-byte length, `header` verbatim, then `data_size` bytes.
std::string Image(const std::string& header, size_t data_size) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s + header + std::string(data_size, '\x01');
}

std::string ErrorOf(const std::string& image) {
  auto f = SafetensorsFile::FromBytes(image, "x.safetensors");
  if (f.ok()) return "OK";
  return std::string(f.status().message());
}

TEST(SafetensorsTest, RoundTripAllDtypes) {
  testing::ScratchDir dir;
  // Values exact in every format.
  const std::vector<float> v = {1.0f, -2.5f, 0.125f, 3.0f, -0.0f, 1024.0f};
  std::vector<TensorToWrite> tensors = {
      {"a.f32", StDtype::kF32, {2, 3}, F32Bytes(v)},
      {"b.bf16", StDtype::kBF16, {6}, HalfBytes(v, true)},
      {"c.f16", StDtype::kF16, {3, 2}, HalfBytes(v, false)},
      {"d.empty", StDtype::kF32, {0, 4}, {}},
  };
  const std::string path = dir.Sub("t.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  for (const char* name : {"a.f32", "b.bf16", "c.f16"}) {
    const SafetensorsEntry* e = f.Find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->num_elements, 6);
    std::vector<float> out(6);
    ASSERT_TRUE(f.ReadF32(name, out.data(), 6).ok()) << name;
    EXPECT_EQ(out, v) << name;
  }
  EXPECT_EQ(f.Find("a.f32")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*f.Find("b.bf16")->type, StDtype::kBF16);
  EXPECT_EQ(f.Find("c.f16")->dtype, "F16");
  EXPECT_EQ(f.Find("d.empty")->num_elements, 0);
  EXPECT_EQ(f.Find("nope"), nullptr);

  // The data section is 64-byte aligned, so f32 tensors are usable in place.
  const std::string raw = testing::ReadFile(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ((8 + n) % 64, 0u);
  const float* direct = f.DirectF32(*f.Find("a.f32"));
  ASSERT_NE(direct, nullptr);
  EXPECT_EQ(std::vector<float>(direct, direct + 6), v);
  EXPECT_EQ(f.DirectF32(*f.Find("b.bf16")), nullptr);
  auto bytes = f.RawBytes("b.bf16");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), 12u);
}

TEST(SafetensorsTest, ConversionRoundsLikeTheCodec) {
  const std::vector<float> v = {0.1f, -3.14159f, 65504.0f, 1e-7f};
  std::vector<TensorToWrite> t = {{"h", StDtype::kF16, {4}, HalfBytes(v, false)},
                                  {"b", StDtype::kBF16, {4}, HalfBytes(v, true)}};
  testing::ScratchDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.Sub("r.safetensors"), t).ok());
  auto f = SafetensorsFile::Open(dir.Sub("r.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> h(4), b(4);
  ASSERT_TRUE((*f)->ReadF32("h", h.data(), 4).ok());
  ASSERT_TRUE((*f)->ReadF32("b", b.data(), 4).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h[i], kernels::Fp16ToFloat(kernels::FloatToFp16(v[i])));
    EXPECT_EQ(b[i], kernels::Bf16ToFloat(kernels::FloatToBf16(v[i])));
  }
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  testing::ScratchDir dir;
  const std::string path = dir.Sub("w.safetensors");
  auto msg = [&](const std::vector<TensorToWrite>& t) {
    return std::string(WriteSafetensors(path, t).message());
  };
  EXPECT_THAT(msg({{"a", StDtype::kF32, {3}, std::vector<uint8_t>(8)}}), HasSubstr("'a'"));
  EXPECT_THAT(msg({{"a", StDtype::kF32, {1}, std::vector<uint8_t>(4)},
                   {"a", StDtype::kF32, {1}, std::vector<uint8_t>(4)}}),
              HasSubstr("twice"));
  EXPECT_THAT(msg({{"__metadata__", StDtype::kF32, {1}, std::vector<uint8_t>(4)}}),
              HasSubstr("reserved"));
  EXPECT_THAT(msg({{"n", StDtype::kF32, {-1}, {}}}), HasSubstr("bad shape"));
  EXPECT_FALSE(WriteSafetensors(dir.Sub("no/such/dir/x"), {}).ok());
}

TEST(SafetensorsTest, HeaderErrorsNameTheCulprit) {
  const std::string good = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(ErrorOf(Image(good, 16)), "OK");
  EXPECT_THAT(ErrorOf(""), HasSubstr("x.safetensors: file is 0 bytes, too short"));
  EXPECT_THAT(ErrorOf(std::string(7, '\0')), HasSubstr("too short"));
  std::string past = Image(good, 16);
  past[0] = static_cast<char>(200);
  EXPECT_THAT(ErrorOf(past), HasSubstr("runs past the end of the file"));
  std::string huge = Image(good, 16);
  for (int i = 0; i < 8; ++i) huge[i] = '\xff';
  EXPECT_THAT(ErrorOf(huge), HasSubstr("runs past the end of the file"));
  EXPECT_THAT(ErrorOf(Image("{\"w\": ", 0)), HasSubstr("invalid header JSON at byte"));
  EXPECT_THAT(ErrorOf(Image("[1,2]", 0)), HasSubstr("not a JSON object"));
  EXPECT_THAT(ErrorOf(Image(std::string(100, '[') + std::string(100, ']'), 0)),
              HasSubstr("nests too deeply"));
  // Sizes that do not match the shape: the header lies.
  EXPECT_THAT(ErrorOf(Image(good, 20).replace(8 + good.find("16"), 2, "20")),
              HasSubstr("tensor 'w': header lies about sizes"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", 16)),
              HasSubstr("tensor 'w': header lies about sizes"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"I64","shape":[3],"data_offsets":[0,16]}})", 16)),
              HasSubstr("header lies about sizes"));
  // Offsets out of range.
  EXPECT_THAT(ErrorOf(Image(good, 15)),
              HasSubstr("tensor 'w': data_offsets [0, 16] run past the end of the data section"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16)),
              HasSubstr("tensor 'w': data_offsets end 4 is before begin 8"));
  EXPECT_THAT(
      ErrorOf(Image(
          R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
          16)),
      HasSubstr("run past the end"));
  // Malformed entries.
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("tensor 'w': missing string 'dtype'"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4)),
              HasSubstr("'shape'"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("is not a size"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)),
              HasSubstr("is not a size"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4)),
              HasSubstr("'data_offsets'"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":3})", 4)), HasSubstr("tensor 'w': entry is not"));
  EXPECT_THAT(
      ErrorOf(Image(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4)),
      HasSubstr("overflows"));
  EXPECT_THAT(ErrorOf(Image(R"({"__metadata__":{"a":1}})", 0)), HasSubstr("__metadata__"));
  EXPECT_THAT(ErrorOf(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            8)),
              HasSubstr("tensor 'w' is listed twice"));
  // Keys repeated inside entries or metadata are not tensor names.
  EXPECT_EQ(ErrorOf(Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          4)),
            "OK");
}

TEST(SafetensorsTest, OverlapAndOtherDtypesAreListedButNotRead) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                             R"("q":{"dtype":"Q4_WEIRD","shape":[3],"data_offsets":[0,1]}})";
  auto f = SafetensorsFile::FromBytes(Image(header, 8), "o.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  float x[2];
  EXPECT_TRUE((*f)->ReadF32("b", x, 1).ok());
  absl::Status s = (*f)->ReadF32("i", x, 2);
  EXPECT_THAT(std::string(s.message()), HasSubstr("o.safetensors: tensor 'i': unsupported dtype"));
  s = (*f)->ReadF32("q", x, 3);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unsupported dtype"));
  s = (*f)->ReadF32("a", x, 1);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensor 'a': has 2 elements"));
  s = (*f)->ReadF32("zzz", x, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'zzz'"));
}

TEST(SafetensorsTest, MisalignedF32IsCopied) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  std::string image = Image(header, 5);
  const float v = 2.75f;
  std::memcpy(&image[8 + header.size() + 1], &v, 4);
  auto f = SafetensorsFile::FromBytes(image, "m");
  ASSERT_TRUE(f.ok()) << f.status();
  float out = 0;
  ASSERT_TRUE((*f)->ReadF32("a", &out, 1).ok());
  EXPECT_EQ(out, 2.75f);
}

TEST(SafetensorsTest, OpenErrorsNameThePath) {
  testing::ScratchDir dir;
  auto missing = SafetensorsFile::Open(dir.Sub("none.safetensors"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("none.safetensors"));
  auto directory = SafetensorsFile::Open(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("not a regular file"));
  testing::WriteFile(dir.Sub("short.safetensors"), "abc");
  auto truncated = SafetensorsFile::Open(dir.Sub("short.safetensors"));
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()),
              HasSubstr("short.safetensors: file is 3 bytes"));
  testing::WriteFile(dir.Sub("empty.safetensors"), "");
  EXPECT_FALSE(SafetensorsFile::Open(dir.Sub("empty.safetensors")).ok());
}

TEST(SafetensorsTest, DtypeNames) {
  StDtype d;
  EXPECT_TRUE(ParseStDtype("BF16", &d));
  EXPECT_EQ(d, StDtype::kBF16);
  EXPECT_FALSE(ParseStDtype("bf16", &d));
  EXPECT_EQ(StDtypeName(StDtype::kF16), "F16");
  EXPECT_EQ(StDtypeSize(StDtype::kF32), 4u);
}

}  // namespace
}  // namespace ced
