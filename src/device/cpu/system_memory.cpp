#include "device/cpu/system_memory.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace pier {
namespace {

// cgroup v1 reports "no limit" as a huge page-rounded number (e.g. 9223372036854771712).
constexpr uint64_t kV1UnlimitedThreshold = uint64_t{1} << 62;

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint64_t> ParseU64(std::string_view s) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// Directories from `root + cgroup_path` up to `root`, deepest first. A path that leaves the
// namespace ("/../..") only yields the root: the mount there is the process's own cgroup.
std::vector<std::filesystem::path> DirsUpward(const std::filesystem::path& root,
                                              std::string_view cgroup_path) {
  std::vector<std::string> parts;
  bool escapes = false;
  size_t pos = 0;
  while (pos < cgroup_path.size()) {
    size_t next = cgroup_path.find('/', pos);
    if (next == std::string_view::npos) next = cgroup_path.size();
    std::string_view part = cgroup_path.substr(pos, next - pos);
    if (part == "..") escapes = true;
    if (!part.empty() && part != ".") parts.emplace_back(part);
    pos = next + 1;
  }
  std::vector<std::filesystem::path> dirs;
  if (!escapes) {
    for (size_t n = parts.size(); n > 0; --n) {
      std::filesystem::path dir = root;
      for (size_t i = 0; i < n; ++i) dir /= parts[i];
      dirs.push_back(dir);
    }
  }
  dirs.push_back(root);
  return dirs;
}

// Reads the tightest limit along `dirs` from `limit_file`. nullopt: no limit anywhere.
Result<std::optional<CgroupMemoryLimit>> TightestLimit(
    const std::vector<std::filesystem::path>& dirs, const char* limit_file, const char* usage_file,
    int version) {
  std::optional<CgroupMemoryLimit> best;
  for (const auto& dir : dirs) {
    std::optional<std::string> text = ReadFile(dir / limit_file);
    if (!text) continue;
    std::string_view value = Trim(*text);
    if (value == "max") continue;
    std::optional<uint64_t> limit = ParseU64(value);
    if (!limit) {
      return DataLossError((dir / limit_file).string() +
                           ": expected a byte count or \"max\", got \"" + std::string(value) +
                           "\"");
    }
    if (version == 1 && *limit >= kV1UnlimitedThreshold) continue;
    if (best && best->limit_bytes <= *limit) continue;
    CgroupMemoryLimit found;
    found.limit_bytes = *limit;
    found.path = dir.string();
    found.version = version;
    if (std::optional<std::string> usage = ReadFile(dir / usage_file)) {
      found.usage_bytes = ParseU64(Trim(*usage)).value_or(0);
    }
    best = found;
  }
  return best;
}

}  // namespace

uint64_t SystemMemory::CapacityBytes() const {
  if (!cgroup) return mem_available_bytes;
  return std::min(mem_available_bytes, cgroup->limit_bytes);
}

uint64_t SystemMemory::AvailableNowBytes() const {
  if (!cgroup) return mem_available_bytes;
  uint64_t headroom =
      cgroup->limit_bytes > cgroup->usage_bytes ? cgroup->limit_bytes - cgroup->usage_bytes : 0;
  return std::min(mem_available_bytes, headroom);
}

Result<SystemMemory> ParseMeminfo(const std::string& text) {
  SystemMemory memory;
  bool have_total = false;
  bool have_available = false;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string_view key(line.data(), colon);
    std::string_view rest = Trim(std::string_view(line).substr(colon + 1));
    if (key != "MemTotal" && key != "MemAvailable") continue;
    size_t space = rest.find(' ');
    std::optional<uint64_t> kib = ParseU64(rest.substr(0, space));
    if (!kib || (space != std::string_view::npos && Trim(rest.substr(space)) != "kB")) {
      return DataLossError("meminfo: cannot parse \"" + line + "\"");
    }
    if (key == "MemTotal") {
      memory.mem_total_bytes = *kib * 1024;
      have_total = true;
    } else {
      memory.mem_available_bytes = *kib * 1024;
      have_available = true;
    }
  }
  if (!have_total || !have_available) {
    return DataLossError("meminfo: MemTotal or MemAvailable is missing (kernel older than 3.14?)");
  }
  return memory;
}

Result<std::optional<CgroupMemoryLimit>> ReadCgroupMemoryLimit(const SystemMemoryRoots& roots) {
  std::optional<std::string> self = ReadFile(std::filesystem::path(roots.proc) / "self/cgroup");
  if (!self) return std::optional<CgroupMemoryLimit>();
  std::optional<std::string> v2_path;
  std::optional<std::string> v1_path;
  std::istringstream lines(*self);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controller,list:/path"
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string id = line.substr(0, first);
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (id == "0" && controllers.empty()) {
      v2_path = path;
      continue;
    }
    std::istringstream list(controllers);
    std::string controller;
    while (std::getline(list, controller, ',')) {
      if (controller == "memory") v1_path = path;
    }
  }
  std::filesystem::path root(roots.cgroup);
  if (v2_path) {
    PIER_ASSIGN_OR_RETURN(
        std::optional<CgroupMemoryLimit> limit,
        TightestLimit(DirsUpward(root, *v2_path), "memory.max", "memory.current", 2));
    if (limit) return limit;
  }
  if (v1_path) {
    return TightestLimit(DirsUpward(root / "memory", *v1_path), "memory.limit_in_bytes",
                         "memory.usage_in_bytes", 1);
  }
  return std::optional<CgroupMemoryLimit>();
}

Result<SystemMemory> ReadSystemMemory(const SystemMemoryRoots& roots) {
  std::filesystem::path meminfo_path = std::filesystem::path(roots.proc) / "meminfo";
  std::optional<std::string> meminfo = ReadFile(meminfo_path);
  if (!meminfo) return IoError("cannot read " + meminfo_path.string());
  PIER_ASSIGN_OR_RETURN(SystemMemory memory, ParseMeminfo(*meminfo));
  PIER_ASSIGN_OR_RETURN(memory.cgroup, ReadCgroupMemoryLimit(roots));
  return memory;
}

}  // namespace pier
