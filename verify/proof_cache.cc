#include "verify/proof_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ir/json_util.h"

namespace loom::verify {

ProofCache::ProofCache(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  auto text = ir::ReadTextFile(Path(), kMaxCacheBytes);
  if (text.ok()) known_ = Parse(*text);
}

absl::flat_hash_set<std::string> ProofCache::Parse(absl::string_view text) {
  absl::flat_hash_set<std::string> keys;
  constexpr absl::string_view kTag = "proved ";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, kTag)) continue;
    std::optional<std::string> key = Unescape(line.substr(kTag.size()));
    if (key.has_value()) keys.insert(*std::move(key));
  }
  return keys;
}

std::string ProofCache::Line(absl::string_view key) {
  return absl::StrCat("proved ", Escape(key), "\n");
}

void ProofCache::Add(const std::string& key) {
  if (dir_.empty()) return;
  absl::StrAppend(&fresh_, Line(key));
}

void ProofCache::Flush() {
  if (dir_.empty() || fresh_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const int fd = ::open(Path().c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
  if (fd < 0) return;  // an unwritable cache only costs the next run its proofs
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxCacheBytes) {
    ::close(fd);
    return;
  }
  size_t written = 0;
  while (written < fresh_.size()) {
    const ssize_t n = ::write(fd, fresh_.data() + written, fresh_.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  fresh_.clear();
}

std::string ProofCache::Path() const { return absl::StrCat(dir_, "/proved-laws"); }

std::string ProofCache::Escape(absl::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> ProofCache::Unescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i >= text.size()) return std::nullopt;
    switch (text[i]) {
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      default: return std::nullopt;
    }
  }
  return out;
}

}  // namespace loom::verify
