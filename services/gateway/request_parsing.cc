#include "services/gateway/request_parsing.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"

namespace ced::gateway {
namespace {

bool IsUtf8(const std::string& s) { return ToValidUtf8(s) == s; }

// Names the first top-level string field of `descriptor` whose value in
// `bytes` is not UTF-8; "" when there is none.
std::string FindInvalidUtf8Field(const google::protobuf::Descriptor& descriptor,
                                 const std::string& bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return "";
  std::vector<int> seen(static_cast<size_t>(descriptor.field_count()), 0);
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* fd = descriptor.FindFieldByNumber(field.number());
    if (fd == nullptr || fd->type() != google::protobuf::FieldDescriptor::TYPE_STRING) continue;
    const int index = seen[static_cast<size_t>(fd->index())]++;
    if (IsUtf8(field.length_delimited())) continue;
    return fd->is_repeated() ? absl::StrCat(fd->name(), "[", index, "]") : fd->name();
  }
  return "";
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  if (message->ParseFromString(bytes)) return absl::OkStatus();
  const std::string field = FindInvalidUtf8Field(*message->GetDescriptor(), bytes);
  if (!field.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": invalid UTF-8"));
  return absl::InvalidArgumentError(
      absl::StrCat("request: malformed ", message->GetDescriptor()->full_name()));
}

absl::Status SerializeMessage(const google::protobuf::Message& message, grpc::ByteBuffer* buffer) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    return absl::InternalError(
        absl::StrCat("cannot serialize ", message.GetDescriptor()->full_name()));
  }
  grpc::Slice slice(bytes);
  *buffer = grpc::ByteBuffer(&slice, 1);
  return absl::OkStatus();
}

}  // namespace ced::gateway
