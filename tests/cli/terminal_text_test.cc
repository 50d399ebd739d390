#include "services/cli/terminal_text.h"

#include "gtest/gtest.h"

namespace ced::cli {
namespace {

TEST(TerminalTextTest, ControlBytesAreEscapedTextIsNot) {
  EXPECT_EQ(EscapeControls("plain text\nline two\tcol"), "plain text\nline two\tcol");
  EXPECT_EQ(EscapeControls("\x1b[2Jgone"), "\\x1b[2Jgone");
  EXPECT_EQ(EscapeControls(std::string("a\0b\a\r\x7f", 6)), "a\\x00b\\x07\\x0d\\x7f");
  // C1 controls (U+0080..U+009F) as UTF-8; other two-byte characters stay.
  EXPECT_EQ(EscapeControls("\xc2\x9b" "31m"), "\\x9b31m");
  EXPECT_EQ(EscapeControls("caf\xc3\xa9 \xc2\xa0 \xe4\xb8\xad \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xc2\xa0 \xe4\xb8\xad \xf0\x9f\x98\x80");
  EXPECT_EQ(EscapeControls("\xef\xbf\xbd"), "\xef\xbf\xbd");  // U+FFFD stays
}

}  // namespace
}  // namespace ced::cli
