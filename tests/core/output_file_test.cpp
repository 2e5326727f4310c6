// Output files are whole or absent: a failed write leaves nothing under the final name.
#include "sim/core/output_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace foresight {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("foresight-output-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }
  fs::path dir_;
};

TEST_F(OutputFileTest, WritesWholeFileAndLeavesNoTemporary) {
  ASSERT_TRUE(write_file_atomically(path("a.json"), "{\"x\": 1}\n").ok());
  EXPECT_EQ(read(path("a.json")), "{\"x\": 1}\n");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(OutputFileTest, UncommittedFileLeavesThePreviousOne) {
  ASSERT_TRUE(write_file_atomically(path("a.json"), "old").ok());
  {
    auto out = OutputFile::open(path("a.json"));
    ASSERT_TRUE(out.ok());
    std::fputs("new but never committed", out->stream());
  }
  EXPECT_EQ(read(path("a.json")), "old");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(OutputFileTest, MissingFolderAndFolderAsFileAreErrors) {
  const Status s = write_file_atomically(path("no/such/folder/a.json"), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("does not exist"), std::string::npos) << s.error().message();
  const Status d = check_output_path(dir_.string(), "--out");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("--out: "), std::string::npos) << d.error().message();
  EXPECT_NE(d.error().message().find("is a folder"), std::string::npos) << d.error().message();
  EXPECT_EQ(entries(), 0u);
}

TEST_F(OutputFileTest, FullDeviceIsAnErrorWithTheReason) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const Status s = write_file_atomically("/dev/full", std::string(1 << 16, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/dev/full: cannot write: No space left on device"), std::string::npos)
      << s.error().message();
  EXPECT_TRUE(fs::exists("/dev/full") && !fs::is_regular_file("/dev/full"));  // still the device
}

// A file size limit stands in for a full disk: the write fails part way, and the destination
// keeps its previous content.
TEST_F(OutputFileTest, FailedWriteKeepsThePreviousFile) {
  ASSERT_TRUE(write_file_atomically(path("a.json"), "old").ok());
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status s = write_file_atomically(path("a.json"), std::string(1 << 20, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("cannot write"), std::string::npos) << s.error().message();
  EXPECT_EQ(read(path("a.json")), "old");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(OutputFileTest, SymbolicLinkKeepsPointingAtTheNewContent) {
  ASSERT_TRUE(write_file_atomically(path("target.json"), "old").ok());
  fs::create_symlink(path("target.json"), path("link.json"));
  ASSERT_TRUE(write_file_atomically(path("link.json"), "new").ok());
  EXPECT_TRUE(fs::is_symlink(path("link.json")));
  EXPECT_EQ(read(path("target.json")), "new");
}

TEST_F(OutputFileTest, CheckLeavesNothingBehind) {
  ASSERT_TRUE(check_output_path(path("later.json"), "--trace").ok());
  EXPECT_EQ(entries(), 0u);
  EXPECT_TRUE(check_output_path("/dev/null", "--trace").ok());
}

}  // namespace
}  // namespace foresight
