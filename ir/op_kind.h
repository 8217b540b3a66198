#ifndef LOOM_IR_OP_KIND_H_
#define LOOM_IR_OP_KIND_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::ir {

// The closed set of op kinds, sorted by textual name.
// X(enumerator, name, min inputs, max inputs, outputs); -1 = variadic / set by attributes.
// Everything else an op knows lives in its OpSchema (ir/op_schema.h).
#define LOOM_OP_KIND_LIST(X)                       \
  X(kAccumulate, "accumulate", 1, -1, 1)         \
  X(kAdamW, "adamw", 4, 4, 3)                    \
  X(kAdd, "add", 2, 2, 1)                        \
  X(kArange, "arange", 0, 0, 1)                  \
  X(kAttention, "attention", 3, 3, 2)            \
  X(kAttentionGrad, "attention_grad", 6, 7, 3)   \
  X(kAttentionMerge, "attention_merge", 4, 4, 2) \
  X(kCast, "cast", 1, 1, 1)                      \
  X(kClipCoef, "clip_coef", 1, 1, 1)             \
  X(kCompare, "compare", 2, 2, 1)                \
  X(kConcat, "concat", 1, -1, 1)                 \
  X(kCos, "cos", 1, 1, 1)                        \
  X(kCrossEntropy, "cross_entropy", 2, 2, 1)     \
  X(kCrossEntropyGrad, "cross_entropy_grad", 3, 3, 1)\
  X(kCumsum, "cumsum", 1, 1, 1)                  \
  X(kDiv, "div", 2, 2, 1)                        \
  X(kDivScalar, "div_scalar", 2, 2, 1)           \
  X(kEmbedding, "embedding", 2, 2, 1)            \
  X(kEmbeddingGrad, "embedding_grad", 2, 2, 1)   \
  X(kExp, "exp", 1, 1, 1)                        \
  X(kExpand, "expand", 1, 1, 1)                  \
  X(kFill, "fill", 0, 0, 1)                      \
  X(kGelu, "gelu", 1, 1, 1)                      \
  X(kGeluExact, "gelu_exact", 1, 1, 1)          \
  X(kGeluExactGrad, "gelu_exact_grad", 2, 2, 1) \
  X(kGeluGrad, "gelu_grad", 2, 2, 1)             \
  X(kIndex, "index", 2, -1, 1)                   \
  X(kLayerNorm, "layernorm", 3, 3, 1)            \
  X(kLayerNormGrad, "layernorm_grad", 3, 3, 3)   \
  X(kLinear, "linear", 2, 3, 1)                  \
  X(kLinearWGrad, "linear_wgrad", 2, 2, 1)       \
  X(kLog, "log", 1, 1, 1)                        \
  X(kLogSoftmax, "log_softmax", 1, 1, 1)         \
  X(kLogSoftmaxGrad, "log_softmax_grad", 2, 2, 1)\
  X(kLogical, "logical", 2, 2, 1)                \
  X(kMatMul, "matmul", 2, 2, 1)                  \
  X(kMax, "max", 1, 1, 1)                        \
  X(kMaxGrad, "max_grad", 2, 2, 1)               \
  X(kMean, "mean", 1, 1, 1)                      \
  X(kMoeCombine, "moe_combine", 3, 3, 1)         \
  X(kMoeCombineGrad, "moe_combine_grad", 4, 4, 2)\
  X(kMoeDispatch, "moe_dispatch", 2, 2, 1)       \
  X(kMoeDispatchGrad, "moe_dispatch_grad", 2, 2, 1)\
  X(kMul, "mul", 2, 2, 1)                        \
  X(kMulScalar, "mul_scalar", 2, 2, 1)           \
  X(kNeg, "neg", 1, 1, 1)                        \
  X(kPad, "pad", 1, 1, 1)                        \
  X(kPick, "pick", 2, 2, 1)                      \
  X(kPickGrad, "pick_grad", 2, 2, 1)             \
  X(kPow, "pow", 1, 1, 1)                        \
  X(kRelu, "relu", 1, 1, 1)                      \
  X(kReluGrad, "relu_grad", 2, 2, 1)             \
  X(kReshape, "reshape", 1, 1, 1)                \
  X(kRmsNorm, "rmsnorm", 2, 2, 1)                \
  X(kRmsNormGrad, "rmsnorm_grad", 3, 3, 2)       \
  X(kRope, "rope", 1, 1, 1)                      \
  X(kRsqrt, "rsqrt", 1, 1, 1)                    \
  X(kScale, "scale", 1, 1, 1)                    \
  X(kSgd, "sgd", 2, 2, 1)                        \
  X(kSigmoid, "sigmoid", 1, 1, 1)                \
  X(kSigmoidGrad, "sigmoid_grad", 2, 2, 1)       \
  X(kSilu, "silu", 1, 1, 1)                      \
  X(kSiluGrad, "silu_grad", 2, 2, 1)             \
  X(kSin, "sin", 1, 1, 1)                        \
  X(kSlice, "slice", 1, 1, 1)                    \
  X(kSoftmax, "softmax", 1, 1, 1)                \
  X(kSoftmaxGrad, "softmax_grad", 2, 2, 1)       \
  X(kSplit, "split", 1, 1, -1)                   \
  X(kSqrt, "sqrt", 1, 1, 1)                      \
  X(kStopGradient, "stop_gradient", 1, 1, 1)     \
  X(kSub, "sub", 2, 2, 1)                        \
  X(kSum, "sum", 1, 1, 1)                        \
  X(kSumSquares, "sum_squares", 1, 1, 1)         \
  X(kSwiGlu, "swiglu", 2, 2, 1)                  \
  X(kSwiGluGrad, "swiglu_grad", 3, 3, 2)         \
  X(kTanh, "tanh", 1, 1, 1)                      \
  X(kTanhGrad, "tanh_grad", 2, 2, 1)             \
  X(kTopKGate, "topk_gate", 1, 1, 2)             \
  X(kTopKGateGrad, "topk_gate_grad", 3, 3, 1)    \
  X(kTranspose, "transpose", 1, 1, 1)            \
  X(kWhere, "where", 3, 3, 1)

enum class OpKind : int32_t {
#define LOOM_OP_KIND_ENUM_(e, name, min_in, max_in, outs) e,
  LOOM_OP_KIND_LIST(LOOM_OP_KIND_ENUM_)
#undef LOOM_OP_KIND_ENUM_
};

inline constexpr int kNumOpKinds = 0
#define LOOM_OP_KIND_COUNT_(e, name, min_in, max_in, outs) +1
    LOOM_OP_KIND_LIST(LOOM_OP_KIND_COUNT_)
#undef LOOM_OP_KIND_COUNT_
    ;

// Arity as declared in the list.
struct OpArity {
  int min_inputs;
  int max_inputs;   // -1: any number >= min_inputs
  int num_outputs;  // -1: decided by attributes
};

absl::string_view OpKindName(OpKind kind);
absl::StatusOr<OpKind> ParseOpKind(absl::string_view name);
OpArity GetOpArity(OpKind kind);

}  // namespace loom::ir

#endif  // LOOM_IR_OP_KIND_H_
