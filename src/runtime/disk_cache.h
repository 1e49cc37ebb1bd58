// Compiled kernels on disk, shared by every backend that compiles (the CPU's JIT objects,
// Vulkan's SPIR-V, CUDA's cubins): one cache directory and one verified entry format.
//
// Directory: $ALK_CACHE_DIR/<sub>, else $XDG_CACHE_HOME/alk/<sub>, else ~/.cache/alk/<sub>.
// Entry: magic (8 bytes), u64 key bytes, the key text, u64 payload bytes, the payload. The
// key is the full text the payload was compiled from (source, target, compiler version):
// an entry is used only when its stored key equals the one asked for, so a hash collision
// in the file name or a damaged file costs a recompile, never a wrong kernel. Entries are
// written beside and renamed, so a reader never sees half a file.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace alk {

// The directory (created), or "" when none is writable: then callers keep memory caches only.
std::string cache_dir(std::string_view sub);
// mkdir -p; true when `path` is a writable directory afterwards.
bool make_dirs(const std::string& path);
// FNV-1a, 64 bits: names cache files (entries are verified against their full key).
uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull);

// The payload of the entry at `path` when its magic and key match, else nullopt.
std::optional<std::string> read_cache_entry(const std::string& path, std::string_view magic, std::string_view key);
// Writes an entry (a full disk costs a recompile next time, nothing more).
void write_cache_entry(const std::string& path, std::string_view magic, std::string_view key, std::string_view payload);

}  // namespace alk
