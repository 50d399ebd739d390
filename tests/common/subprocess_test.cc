// ced_subprocess: spawning with redirections, environment overrides, waiting
// with a timeout, and RunToCompletion's captured output.
#include "services/common/subprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace ced::services {
namespace {

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions o;
  o.argv = {"sh", "-c", script};
  return o;
}

TEST(SubprocessTest, RunToCompletionCapturesStdoutAndTheExitStatus) {
  auto run = RunToCompletion(Shell("printf 'a b\\n'; echo err >&2; exit 3"), 30);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output, "a b\n");  // stderr stays ours
  ASSERT_TRUE(WIFEXITED(run->wait_status));
  EXPECT_EQ(WEXITSTATUS(run->wait_status), 3);
  EXPECT_FALSE(run->exited_ok());
}

// Services ignore SIGPIPE (InstallShutdownSignals); an ignored signal would
// stay ignored across exec, so children get the default action back, on both
// spawn paths.
TEST(SubprocessTest, ChildrenGetTheDefaultSigpipeBack) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &before), 0);
  for (const bool fork_path : {false, true}) {
    // SigIgn: the ignored signals as a hex mask; SIGPIPE (13) is bit 12.
    SubprocessOptions o = Shell("grep '^SigIgn' /proc/self/status | cut -f2");
    o.kill_with_parent = fork_path;
    auto run = RunToCompletion(o, 30);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(run->exited_ok());
    const uint64_t mask = std::stoull(run->output, nullptr, 16);
    EXPECT_EQ(mask & (uint64_t{1} << (SIGPIPE - 1)), 0u)
        << (fork_path ? "fork" : "posix_spawn") << ": " << run->output;
  }
  ASSERT_EQ(sigaction(SIGPIPE, &before, nullptr), 0);
}

TEST(SubprocessTest, StderrToStdoutMergesBothStreams) {
  SubprocessOptions o = Shell("echo one; echo two >&2");
  o.stderr_to_stdout = true;
  auto run = RunToCompletion(o, 30);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output, "one\ntwo\n");
  EXPECT_TRUE(run->exited_ok());
}

TEST(SubprocessTest, ArgumentsReachTheProgramUnquoted) {
  SubprocessOptions o;
  o.argv = {"printf", "%s|", "it's", "$HOME", "a b"};
  auto run = RunToCompletion(o, 30);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output, "it's|$HOME|a b|");
}

TEST(SubprocessTest, EnvironmentOverridesSetAndUnset) {
  setenv("CED_SUBPROCESS_TEST_GONE", "x", 1);
  SubprocessOptions o = Shell("echo \"${CED_SUBPROCESS_TEST_SET}-${CED_SUBPROCESS_TEST_GONE-unset}\"");
  o.env["CED_SUBPROCESS_TEST_SET"] = "yes";
  o.env["CED_SUBPROCESS_TEST_GONE"] = std::nullopt;
  auto run = RunToCompletion(o, 30);
  unsetenv("CED_SUBPROCESS_TEST_GONE");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output, "yes-unset\n");
}

TEST(SubprocessTest, RunToCompletionKillsAChildPastItsTimeout) {
  auto run = RunToCompletion(Shell("exec sleep 30"), 0.3);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded) << run.status();
  EXPECT_NE(std::string(run.status().message()).find("did not finish"), std::string::npos);
}

TEST(SubprocessTest, AMissingProgramIsAnErrorNamingIt) {
  SubprocessOptions o;
  o.argv = {"ced-no-such-program-here"};
  auto run = RunToCompletion(o, 30);
  // posix_spawnp reports the failed exec either at spawn or as exit 127.
  if (run.ok()) {
    EXPECT_TRUE(WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 127);
  } else {
    EXPECT_NE(std::string(run.status().message()).find("ced-no-such-program-here"),
              std::string::npos)
        << run.status();
  }
  EXPECT_EQ(RunToCompletion(SubprocessOptions{}, 30).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, OutputFileWaitAndSignal) {
  const std::string log = ::testing::TempDir() + "/subprocess_test_" + std::to_string(getpid());
  SubprocessOptions o = Shell("echo to-file; echo also >&2; exec sleep 30");
  o.output_path = log;
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE((*child)->Running());
  EXPECT_EQ((*child)->Wait(0.2).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*child)->Signal(SIGTERM));
  auto st = (*child)->Wait(30);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGTERM);
  EXPECT_FALSE((*child)->Running());
  EXPECT_FALSE((*child)->Signal(SIGTERM));  // reaped
  EXPECT_EQ((*child)->Wait(1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFileOrEmpty(log), "to-file\nalso\n");
  std::remove(log.c_str());
}

// A child that says part of a line and then nothing: the reader times out
// instead of blocking, keeps the part, and gets the whole line, a last line
// without its newline, and the end once the child is gone.
TEST(LineReaderTest, DeadlinePartialLinesAndEnd) {
  SubprocessOptions o = Shell("printf 'one\\ntw'; sleep 1; printf 'o\\nthree'");
  o.pipe_stdout = true;
  auto proc = Subprocess::Spawn(o);
  ASSERT_TRUE(proc.ok()) << proc.status();
  LineReader reader((*proc)->ReleaseStdout());
  std::string line;
  ASSERT_EQ(reader.Next(&line, std::chrono::steady_clock::now() + std::chrono::seconds(30)),
            LineReader::Got::kLine);
  EXPECT_EQ(line, "one\n");
  // "tw" came; the rest comes a second later.
  EXPECT_EQ(reader.Next(&line, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)),
            LineReader::Got::kTimeout);
  ASSERT_EQ(reader.Next(&line, std::chrono::steady_clock::now() + std::chrono::seconds(30)),
            LineReader::Got::kLine);
  EXPECT_EQ(line, "two\n");
  ASSERT_EQ(reader.Next(&line), LineReader::Got::kLine);
  EXPECT_EQ(line, "three");
  EXPECT_EQ(reader.Next(&line), LineReader::Got::kEof);
  EXPECT_TRUE((*proc)->Wait(-1).ok());
}

}  // namespace
}  // namespace ced::services
