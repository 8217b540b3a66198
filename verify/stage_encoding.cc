#include "verify/stage_encoding.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace loom::verify::stage_encoding {
namespace {

// Codes that open each kind of entry, so that entries of different kinds never
// read alike.
enum Tag : int64_t {
  kTaskTag = -1001,
  kCollectiveTag = -1002,
  kPhantomTag = -1003,
  kNewValue = -1004,
  kNewOp = -1005,
  kNewTensor = -1006,
  kCopyOf = -1007,
  kNone = -1008,
};

class Encoder {
 public:
  Encoder(const EncodeInputs& in, int stage, RenameTables& tables)
      : spec_(in.spec),
        plan_(in.plan),
        sliced_(in.sliced),
        mbmap_(in.mbmap),
        share_group_(in.share_group),
        item_stage_(in.item_stage),
        producer_(in.producer),
        inputs_(in.inputs),
        outputs_(in.outputs),
        partners_(in.partners),
        listed_(in.listing),
        stage_(stage),
        tables_(tables) {}

  // Writes the stage's signature into `sig` (cleared first; its buffers are
  // reused from stage to stage) and gives the stage its renaming.
  void Encode(Stage& stage, Signature& sig) {
    sig.Clear();
    sig_ = &sig;
    for (int64_t i : stage.items) Item(i);
    stage.values = std::move(value_order_);
    stage.ops = std::move(op_order_);
    stage.tensors = std::move(tensor_order_);
  }

 private:
  void Put(int64_t x) { sig_->codes.push_back(x); }

  void Item(int64_t item) {
    const int64_t nt = static_cast<int64_t>(plan_.tasks.size());
    const int64_t nc = static_cast<int64_t>(plan_.collectives.size());
    if (item < nt) {
      const ir::Task& t = plan_.tasks[item];
      Put(kTaskTag);
      Put(static_cast<int64_t>(t.kind));
      Put(t.op == ir::kNoId ? kNone : Op(t.op));
      sig_->attrs.push_back(&t.attrs);
      Put(static_cast<int64_t>(t.info.phase));
      Put(t.info.microbatch);
      // Replication rules of a factored plan's unit.
      Put(static_cast<int64_t>(t.dp_attr_steps.size()));
      for (const auto& [name, step] : t.dp_attr_steps) {
        Put(static_cast<int64_t>(std::hash<std::string>()(name)));
        sig_->names.push_back(&name);
        Put(step);
      }
      Values(inputs_.of(item));
      Values(outputs_.of(item));
    } else if (item < nt + nc) {
      const ir::Collective& c = plan_.collectives[item - nt];
      Put(kCollectiveTag);
      Put(static_cast<int64_t>(c.kind));
      Put(static_cast<int64_t>(c.reduce));
      Put(c.dim);
      Put(c.dim2);
      Put(c.microbatch);
      Put(c.spans_dp ? 1 : 0);
      Put(static_cast<int64_t>(c.devices.size()));
      Values(inputs_.of(item));
      Values(outputs_.of(item));
    } else {
      const Phantom& p = sliced_->phantoms[item - nt - nc];
      Put(kPhantomTag);
      Put(p.microbatch);
      Put(p.replica);
      Put(Value(p.src0));
      Put(p.src1 == ir::kNoId ? kNone : Value(p.src1));
      Put(Value(p.value));
    }
  }

  void Values(absl::Span<const ir::ValueId> vs) {
    Put(static_cast<int64_t>(vs.size()));
    for (ir::ValueId v : vs) Put(Value(v));
  }

  int64_t Value(ir::ValueId v) {
    if (const int64_t known = tables_.values.Find(v, stage_); known >= 0) return known;
    const int64_t code = static_cast<int64_t>(value_order_.size());
    tables_.values.Set(v, stage_, code);
    value_order_.push_back(v);
    const ir::PlanValue& pv = plan_.values[v];
    Put(kNewValue);
    // Whether the stage computes it or reads it from outside.
    const int64_t p = producer_[v];
    Put(p >= 0 && item_stage_[p] == stage_ ? 1 : 0);
    Put(static_cast<int64_t>(pv.dtype));
    Put(pv.microbatch);
    Put(Tensor(pv.sub.tensor));
    Put(static_cast<int64_t>(pv.sub.box.size()));
    for (const ir::Interval& iv : pv.sub.box) {
      Put(iv.begin);
      Put(iv.end);
    }
    Put(static_cast<int64_t>(pv.sub.part.pieces().size()));
    for (const ir::ValuePart::Piece& piece : pv.sub.part.pieces()) {
      Put(piece.lo.num);
      Put(piece.lo.den);
      Put(piece.hi.num);
      Put(piece.hi.den);
    }
    Put(static_cast<int64_t>(pv.sub.combine));
    Put(pv.sub.scale.num);
    Put(pv.sub.scale.den);
    Put(pv.dp_dim);
    Put(pv.dp_share ? 1 : 0);
    Put(share_group_ != nullptr && (*share_group_)[v] >= 0 ? 1 : 0);
    // What the checks after the walk compare it with: its copies in the other
    // derived replicas, and whether it is a plan output.
    Put(listed_[v]);
    if (auto it = partners_.find(v); it != partners_.end()) {
      for (ir::ValueId w : it->second) Put(w == ir::kNoId ? kNone : Value(w));
    }
    return code;
  }

  int64_t Op(ir::OpId op) {
    if (const int64_t known = tables_.ops.Find(op, stage_); known >= 0) return known;
    const int64_t code = static_cast<int64_t>(op_order_.size());
    tables_.ops.Set(op, stage_, code);
    op_order_.push_back(op);
    const ir::Op& o = spec_.op(op);
    Put(kNewOp);
    const int m = o.info.microbatch;
    const ir::OpId original = mbmap_ != nullptr && m >= 1 ? mbmap_->Op(op, 0) : ir::kNoId;
    if (original != ir::kNoId && original != op) {
      // Copy m of a micro-batch-0 op: its structure is that op's, renamed
      // (CheckMicrobatchSymmetry).
      Put(kCopyOf);
      Put(m);
      Put(Op(original));
      return code;
    }
    Put(static_cast<int64_t>(o.kind));
    sig_->attrs.push_back(&o.attrs);
    Put(static_cast<int64_t>(o.info.phase));
    Put(m);
    Put(static_cast<int64_t>(o.inputs.size()));
    for (ir::TensorId t : o.inputs) Put(Tensor(t));
    Put(static_cast<int64_t>(o.outputs.size()));
    for (ir::TensorId t : o.outputs) Put(Tensor(t));
    return code;
  }

  int64_t Tensor(ir::TensorId t) {
    if (t < 0 || t >= spec_.num_tensors()) return kNone;
    if (const int64_t known = tables_.tensors.Find(t, stage_); known >= 0) return known;
    const int64_t code = static_cast<int64_t>(tensor_order_.size());
    tables_.tensors.Set(t, stage_, code);
    tensor_order_.push_back(t);
    const ir::Tensor& x = spec_.tensor(t);
    Put(kNewTensor);
    if (mbmap_ != nullptr) {
      const int m = mbmap_->TensorMicrobatch(t);
      Put(m);
      const ir::TensorId original = m >= 1 ? mbmap_->Tensor(t, 0) : ir::kNoId;
      if (original != ir::kNoId && original != t) {
        Put(kCopyOf);
        Put(Tensor(original));
        return code;
      }
    }
    Put(static_cast<int64_t>(x.dtype));
    Put(static_cast<int64_t>(x.role));
    sig_->shapes.push_back(&x.shape);
    return code;
  }

  const ir::Graph& spec_;
  const ir::Plan& plan_;
  const SlicedPlan* sliced_;
  const ir::MicrobatchMap* mbmap_;
  const std::vector<int>* share_group_;
  const std::vector<int>& item_stage_;
  absl::Span<const int64_t> producer_;
  const FlatIds& inputs_;
  const FlatIds& outputs_;
  const Partners& partners_;
  absl::Span<const int> listed_;
  const int stage_;
  RenameTables& tables_;
  std::vector<ir::ValueId> value_order_;
  std::vector<ir::OpId> op_order_;
  std::vector<ir::TensorId> tensor_order_;
  Signature* sig_ = nullptr;
};

}  // namespace

void EncodeStage(const EncodeInputs& in, int index, Stage& stage, RenameTables& tables,
                 Signature& sig) {
  Encoder(in, index, tables).Encode(stage, sig);
}

}  // namespace loom::verify::stage_encoding
