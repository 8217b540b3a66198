#include "transform/strategy.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/plan.h"
#include "ir/status_macros.h"

namespace loom::transform {

std::string Strategy::ToString() const {
  std::string out = absl::StrCat("dp", dp, " tp", tp, " pp", pp);
  if (cp > 1) absl::StrAppend(&out, " cp", cp, cp_balanced ? "" : " contiguous");
  if (vpp > 1) absl::StrAppend(&out, " vpp", vpp);
  if (ep > 1) absl::StrAppend(&out, " ep", ep);
  if (sp) absl::StrAppend(&out, " sp");
  if (zero > 0) absl::StrAppend(&out, " zero", zero);
  absl::StrAppend(&out, " mb", microbatches);
  if (recompute) absl::StrAppend(&out, " recompute");
  return out;
}

absl::Status ValidateStrategy(const ir::Graph& spec, const Strategy& s) {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (s.dp < 1 || s.tp < 1 || s.pp < 1 || s.vpp < 1 || s.ep < 1 || s.cp < 1 ||
      s.microbatches < 1) {
    return bad("dp, tp, pp, vpp, ep, cp and micro-batches must be >= 1");
  }
  if (s.cp > 1 && s.ep > 1) {
    return bad("cp ", s.cp, " with ep ", s.ep,
               ": context parallelism is not combined with expert parallelism yet");
  }
  if (s.dp % s.ep != 0) {
    return bad("ep ", s.ep, " must divide dp ", s.dp,
               " (expert parallelism runs inside the data-parallel replicas)");
  }
  if (s.ep > 1) {
    int64_t experts = 0;
    for (const ir::Op& op : spec.ops()) {
      if (op.kind == ir::OpKind::kMoeDispatch) {
        experts = spec.tensor(op.outputs[0]).shape.dim(0);
        break;
      }
    }
    if (experts == 0) return bad("ep ", s.ep, " needs a model with experts");
    if (experts % s.ep != 0) {
      return bad("ep ", s.ep, " does not divide the ", experts, " routed experts");
    }
  }
  if (s.zero < 0 || s.zero > 3) return bad("zero must be 0, 1, 2 or 3, got ", s.zero);
  if (s.sp && s.tp < 2) return bad("sequence parallelism needs tp >= 2");
  if (s.zero > 0 && s.dp < 2) return bad("zero ", s.zero, " needs dp >= 2");
  if (s.vpp > 1 && s.pp < 2) return bad("virtual pipeline stages need pp >= 2");
  LOOM_ASSIGN_OR_RETURN(ir::MicrobatchMap mbmap, ir::MicrobatchMap::Build(spec));
  if (mbmap.microbatches() != s.microbatches) {
    return bad("the training step has ", mbmap.microbatches(), " micro-batches, the strategy ",
               s.microbatches);
  }
  int layers = 0;
  for (const ir::Op& op : spec.ops()) layers = std::max(layers, op.info.layer + 1);
  if (s.pp * s.vpp > std::max(layers, 1)) {
    return bad("pp ", s.pp, " x vpp ", s.vpp, " = ", s.pp * s.vpp,
               " pipeline chunks is more than the ", layers, " layers");
  }
  // The sequence's chunks: cp, or 2 * cp under load balancing.
  const int64_t chunks = s.cp > 1 && s.cp_balanced ? 2 * int64_t{s.cp} : s.cp;
  for (const ir::Tensor& t : spec.tensors()) {
    if (t.producer == ir::kNoId && t.role == ir::TensorRole::kInput && t.shape.rank() >= 1 &&
        t.shape.dim(0) % s.dp != 0) {
      return bad("dp ", s.dp, " does not divide the batch of ", t.shape.dim(0),
                 " sequences of '", t.name, "'");
    }
    if (s.cp > 1 && t.producer == ir::kNoId && t.role == ir::TensorRole::kInput &&
        t.shape.rank() >= 2 && t.shape.dim(1) % chunks != 0) {
      return bad(s.cp_balanced ? absl::StrCat("2 x cp = ", chunks, " load-balanced chunks")
                               : absl::StrCat("cp ", s.cp),
                 " does not divide the sequence length ", t.shape.dim(1), " of '", t.name,
                 "' (context parallelism)");
    }
    if (s.sp && t.producer == ir::kNoId && t.role == ir::TensorRole::kInput &&
        t.shape.rank() >= 2 && t.shape.dim(1) % (s.tp * chunks) != 0) {
      return bad("tp ", s.tp, " does not divide the sequence length ", t.shape.dim(1),
                 " (sequence parallelism)");
    }
  }
  for (const ir::Op& op : spec.ops()) {
    if (op.kind != ir::OpKind::kAttention) continue;
    const int64_t hq = spec.tensor(op.inputs[0]).shape.dim(2);
    const int64_t hkv = spec.tensor(op.inputs[1]).shape.dim(2);
    if (hq % s.tp != 0 || hkv % s.tp != 0) {
      return bad("tp ", s.tp, " does not divide the ", hq, " query / ", hkv, " key-value heads of ",
                 ir::DescribeOp(spec, op));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::transform
