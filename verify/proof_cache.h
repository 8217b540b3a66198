#ifndef LOOM_VERIFY_PROOF_CACHE_H_
#define LOOM_VERIFY_PROOF_CACHE_H_

// Proved laws on disk: one append-only file, DIR/proved-laws, a line per proof
// ("proved <key>", the key's backslashes and line breaks escaped). It is read once,
// and the proofs a run adds are appended in one write at its end, so a cold run
// does not pay a file per law and a warm one reads one file. Lines that do not
// parse (a write cut short) are skipped: an entry only ever stands for the exact key
// it holds.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace loom::verify {

class ProofCache {
 public:
  // About a million proofs; past it the cache is neither read nor grown.
  static constexpr int64_t kMaxCacheBytes = int64_t{256} << 20;

  // The cache of `dir` ("" for none). Only a regular file of bounded size is read;
  // anything else (a FIFO, a link to a device, a file grown past the bound) is a
  // cache with nothing in it.
  explicit ProofCache(std::string dir);

  // Safe from any thread: the known proofs do not change during a run.
  bool Has(const std::string& key) const { return known_.contains(key); }
  // Callers serialise Add and Flush.
  void Add(const std::string& key);
  // Appends the proofs added since the last flush; never blocks on a FIFO, never
  // writes through a link or to something not a regular file.
  void Flush();

  // The keys a cache file's text holds (lines that do not parse skipped).
  static absl::flat_hash_set<std::string> Parse(absl::string_view text);
  // The line of `key` in a cache file, with its line break.
  static std::string Line(absl::string_view key);

 private:
  std::string Path() const;
  static std::string Escape(absl::string_view key);
  static std::optional<std::string> Unescape(absl::string_view text);

  const std::string dir_;
  absl::flat_hash_set<std::string> known_;
  std::string fresh_;
};

}  // namespace loom::verify

#endif  // LOOM_VERIFY_PROOF_CACHE_H_
