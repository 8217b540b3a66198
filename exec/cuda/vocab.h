#ifndef LOOM_EXEC_CUDA_VOCAB_H_
#define LOOM_EXEC_CUDA_VOCAB_H_

// Targets (pick, pick_grad) and ids (embedding, embedding_grad) index a vocabulary;
// a tensor split over the vocabulary holds the piece that starts at `vocab_begin`.
// Shared by the loss and matmul families, host and device code alike.

#include <cstdint>

namespace loom::exec::cuda {

// `vocab_begin` value meaning "no vocab_begin attribute": the tensor holds the whole
// vocabulary. Valid offsets are non-negative.
inline constexpr int64_t kNoVocabBegin = -1;

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_VOCAB_H_
