// AtomicFile (alk/io.h): temp file in the target's directory, fsync, rename, fsync dir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

uint64_t available_memory_bytes() {
  uint64_t avail = 0;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = static_cast<uint64_t>(kb) * 1024;
    std::fclose(f);
  }
  if (avail == 0) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    avail = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
  }
  // A container's limit is lower than what the machine has free (and is what the OOM killer enforces).
  auto read_u64 = [](const char* p, uint64_t* out) {
    std::FILE* f = std::fopen(p, "r");
    if (!f) return false;
    unsigned long long v = 0;
    const bool ok = std::fscanf(f, "%llu", &v) == 1;  // "max" (no limit) does not parse
    std::fclose(f);
    *out = v;
    return ok;
  };
  uint64_t limit = 0, used = 0;
  if ((read_u64("/sys/fs/cgroup/memory.max", &limit) && read_u64("/sys/fs/cgroup/memory.current", &used)) ||
      (read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
       read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used)))
    avail = std::min(avail, limit > used ? limit - used : 0);
  // ALK_MEMORY_LIMIT=bytes: a lower ceiling (tests, and machines shared with other work).
  if (const char* env = std::getenv("ALK_MEMORY_LIMIT"))
    if (const unsigned long long v = std::strtoull(env, nullptr, 10); v > 0) avail = std::min<uint64_t>(avail, v);
  return avail;
}

void check_memory_for(uint64_t bytes, const std::string& op, const std::string& what, Loc loc) {
  const uint64_t avail = available_memory_bytes();
  check(bytes <= avail, op, loc, what, " needs ", bytes, " bytes of memory, more than the ", avail,
        " bytes available to this process");
}

std::string read_file(const std::string& path, const std::string& op, Loc loc) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    check_memory_for(static_cast<uint64_t>(st.st_size), op, "reading '" + path + "'", loc);
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
