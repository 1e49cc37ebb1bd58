// AtomicFile (alk/io.h): temp file in the target's directory, fsync, rename, fsync dir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "alk/io.h"

namespace alk {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// "a/b/c.bin" -> {"a/b", "c.bin"}; "c.bin" -> {".", "c.bin"}; "/c.bin" -> {"/", "c.bin"}.
std::pair<std::string, std::string> split_path(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

AtomicFile::AtomicFile(std::string path, Loc loc) : path_(std::move(path)), loc_(loc) {
  auto [dir, name] = split_path(path_);
  check(!name.empty() && name != "." && name != "..", "write_file", loc_, "'", path_, "' does not name a file");
  std::string tmpl = (dir == "/" ? "/" : dir + "/") + "." + name + ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = ::mkstemp(buf.data());
  if (fd < 0) {
    int err = errno;
    fail("write_file", loc_, "cannot create a temporary file next to '", path_, "': ", errno_text(err));
  }
  temp_path_ = buf.data();
  // mkstemp makes the file 0600; give it the target's mode, or 0644 for a new file.
  struct stat st {};
  mode_t mode = ::stat(path_.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  ::fchmod(fd, mode);
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    int err = errno;
    ::close(fd);
    fail_errno("cannot open", err);
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) abandon();
}

void AtomicFile::abandon() noexcept {
  if (file_) {
    std::fclose(file_);
    file_ = nullptr;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

void AtomicFile::fail_errno(const std::string& what, int err) {
  std::string temp = temp_path_;
  abandon();
  fail("write_file", loc_, "cannot write '", path_, "': ", what, " '", temp, "' failed: ", errno_text(err));
}

void AtomicFile::write(const void* data, size_t bytes) {
  check(file_ != nullptr && !committed_, "write_file", loc_, "write to '", path_, "' after commit or failure");
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes) fail_errno("write to", errno ? errno : EIO);
}

void AtomicFile::commit() {
  check(file_ != nullptr && !committed_, "write_file", loc_, "commit of '", path_, "' after commit or failure");
  if (std::fflush(file_) != 0) fail_errno("flush of", errno);
  if (::fsync(::fileno(file_)) != 0) fail_errno("fsync of", errno);
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) fail_errno("close of", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail_errno("rename of", errno);
  committed_ = true;
  temp_path_.clear();
  // Make the rename itself durable. Some filesystems cannot fsync a directory (EINVAL);
  // the data is already in place then, so only real I/O errors are reported.
  std::string dir = split_path(path_).first;
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int rc = ::fsync(dfd);
    int err = errno;
    ::close(dfd);
    if (rc != 0 && err != EINVAL && err != ENOTSUP)
      fail("write_file", loc_, "wrote '", path_, "' but fsync of directory '", dir, "' failed: ", errno_text(err));
  }
}

std::optional<std::string> try_read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::nullopt;
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  if (!ok) return std::nullopt;
  return out;
}

std::string read_file(const std::string& path, const std::string& op, Loc loc) {
  errno = 0;
  std::optional<std::string> bytes = try_read_file(path);
  if (!bytes) fail(op, loc, "cannot read '", path, "': ", errno ? errno_text(errno) : std::string("read error"));
  return std::move(*bytes);
}

void write_file_atomic(const std::string& path, std::string_view bytes, Loc loc) {
  AtomicFile f(path, loc);
  f.write(bytes);
  f.commit();
}

}  // namespace alk
