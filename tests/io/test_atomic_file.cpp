// AtomicFile: complete files or nothing, no temp files left behind, clear errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "alk/alk.h"
#include "alk/io.h"
#include "error_expect.h"
#include "io/temp_dir.h"

namespace alk {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::string write_error(const std::string& path, const std::string& bytes) {
  try {
    write_file_atomic(path, bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "write_file");
    return e.detail();
  }
  return "";
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

TEST(AtomicFile, WritesAndLeavesNoTempFile) {
  TempDir dir;
  std::string path = dir / "out.bin";
  write_file_atomic(path, std::string("hello\0world", 11));
  EXPECT_EQ(read_file(path), std::string("hello\0world", 11));
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
  EXPECT_EQ(mode_of(path), 0644u);
}

TEST(AtomicFile, ReplacesExistingFileAndKeepsItsMode) {
  TempDir dir;
  std::string path = dir / "out.bin";
  write_file(path, "old contents that are longer");
  ::chmod(path.c_str(), 0600);
  write_file_atomic(path, "new");
  EXPECT_EQ(read_file(path), "new");
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, StreamsSeveralWritesAndRelativePaths) {
  TempDir dir;
  std::string path = dir / "parts.txt";
  {
    AtomicFile f(path);
    EXPECT_EQ(f.temp_path().rfind(dir / ".parts.txt.tmp-", 0), 0u) << f.temp_path();
    EXPECT_TRUE(std::filesystem::exists(f.temp_path()));
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing visible before commit
    f.write("a");
    f.write(std::string(100000, 'b'));
    f.write("", 0);
    f.commit();
    EXPECT_THROW(f.write("late"), Error);  // names the AtomicFile's line (it keeps its maker's)
  }
  EXPECT_EQ(read_file(path).size(), 100001u);
  // A bare file name writes into the working directory.
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  write_file_atomic("bare.txt", "x");
  std::filesystem::current_path(cwd);
  EXPECT_EQ(read_file(dir / "bare.txt"), "x");
}

TEST(AtomicFile, AbandonedWriteKeepsTheOldFile) {
  TempDir dir;
  std::string path = dir / "ckpt.bin";
  write_file(path, "old");
  try {
    AtomicFile f(path);
    f.write("new but partial");
    throw std::runtime_error("interrupted");  // e.g. a failure while serializing
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"ckpt.bin"});
}

TEST(AtomicFile, MissingDirectoryThrowsNamingPathAndErrno) {
  TempDir dir;
  std::string path = dir / "no/such/dir/out.bin";
  std::string err = write_error(path, "x");
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("No such file or directory"), std::string::npos) << err;
  EXPECT_TRUE(dir.list().empty());
}

TEST(AtomicFile, FailedRenameRemovesTempAndKeepsTarget) {
  TempDir dir;
  // The target is a non-empty directory: everything succeeds up to rename(), which fails.
  std::string path = dir / "target";
  std::filesystem::create_directory(path);
  write_file(path + "/keep", "kept");
  std::string err = write_error(path, "data");
  EXPECT_NE(err.find("rename"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_EQ(dir.list(), std::vector<std::string>{"target"});
  EXPECT_EQ(read_file(path + "/keep"), "kept");
}

TEST(AtomicFile, UnwritableDirectoryThrowsAndKeepsOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  std::string sub = dir / "ro";
  std::filesystem::create_directory(sub);
  write_file(sub + "/ckpt.bin", "old");
  ::chmod(sub.c_str(), 0555);
  std::string err = write_error(sub + "/ckpt.bin", "new");
  ::chmod(sub.c_str(), 0755);
  EXPECT_NE(err.find("Permission denied"), std::string::npos) << err;
  EXPECT_EQ(read_file(sub + "/ckpt.bin"), "old");
}

TEST(AtomicFile, SafetensorsSaveIntoMissingDirectoryThrows) {
  TempDir dir;
  EXPECT_ALK_ERROR(save_safetensors(dir / "missing/x.safetensors", {{"w", ones({2})}}), "write_file", "missing/x.safetensors", "No such file");
  std::string path = dir / "x.safetensors";
  save_safetensors(path, {{"w", ones({2})}});
  std::string before = read_file(path);
  // A failing save over an existing checkpoint (duplicate names) leaves it intact.
  EXPECT_ALK_ERROR(save_safetensors(path, {{"w", zeros({3})}, {"w", zeros({3})}}), "safetensors", "duplicate tensor name 'w'");
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"x.safetensors"});
}

}  // namespace
}  // namespace alk
