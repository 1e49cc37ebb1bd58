#include <cstdio>
#include <filesystem>
#include <memory>

#include "alk/dist.h"
#include "alk/io.h"
#include "train/job.h"

namespace alk::train {

Result run(const Config& c, bool resume, std::ostream& log, const std::atomic<bool>* stop) {
  get_device(c.device);  // an unknown device fails here, before any work, listing the devices found
  check(c.task == "gpt" || !dist::launched(), "train", Loc::current(), "data parallel (mpirun, --nproc) is implemented for ",
        "the GPT job only, not --task ", c.task);
  return c.task == "mnist" ? run_mnist(c, resume, log, stop) : run_gpt(c, resume, log, stop);
}

std::string default_corpus(Loc loc) {
  const std::string path = "data/kjv.txt";
  if (std::filesystem::exists(path)) return path;
  check(std::filesystem::exists("/usr/bin/bible"), "train", loc,
        "no corpus given and data/kjv.txt is missing: install Debian's bible-kjv (make deps) or pass --corpus FILE");
  std::filesystem::create_directories("data");
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen("bible -l 100000 Gen1:1-Rev22:21", "r"), pclose);
  check(pipe != nullptr, "train", loc, "cannot run bible");
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe.get())) > 0;) text.append(buf, n);
  check(text.size() > 1000000, "train", loc, "bible printed only ", text.size(), " bytes");
  write_file_atomic(path, text);
  return path;
}

}  // namespace alk::train
