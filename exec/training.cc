#include "exec/training.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exec/host_ops.h"
#include "ir/autodiff.h"
#include "ir/json_util.h"
#include "ir/interpreter.h"
#include "ir/status_macros.h"

namespace loom::exec {
namespace {

using ir::HostTensor;
using ir::TensorId;
using ir::ValueId;
using Feeds = absl::flat_hash_map<TensorId, HostTensor>;

// Token ids: synthetic from a seed, or a file's int32 ids in order, wrapped.
class TokenStream {
 public:
  static absl::StatusOr<TokenStream> Open(const std::string& path, uint64_t seed) {
    TokenStream s;
    s.rng_.seed(seed ^ 0x746f6b656e73ULL);
    if (path.empty()) return s;
    LOOM_ASSIGN_OR_RETURN(const std::string bytes, ir::ReadTextFile(path));
    if (bytes.size() < 4 || bytes.size() % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": a token file holds int32 ids (a multiple of 4 bytes), this one has ",
          bytes.size(), " bytes"));
    }
    s.file_.resize(bytes.size() / 4);
    for (size_t i = 0; i < s.file_.size(); ++i) {
      uint32_t u = 0;
      for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(bytes[4 * i + b]);
      const int32_t id = static_cast<int32_t>(u);
      if (id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": token ", i, " is negative (", id, ")"));
      }
      s.file_[i] = id;
    }
    return s;
  }

  int64_t Next(int64_t bound) {
    if (file_.empty()) return static_cast<int64_t>(rng_() % static_cast<uint64_t>(bound));
    const int64_t id = file_[position_];
    position_ = (position_ + 1) % file_.size();
    return id % bound;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<int32_t> file_;
  size_t position_ = 0;
};

// Which input each spec output replaces in the next step (the optimizer's
// updates: adamw's param', m', v' and sgd's param'; in a mixed-precision step the
// cast of a master's update replaces the master's parameter).
absl::StatusOr<std::vector<std::pair<TensorId, TensorId>>> StateUpdates(const ir::Graph& spec) {
  std::vector<std::pair<TensorId, TensorId>> updates;
  const std::vector<TensorId>& outputs = spec.outputs();
  for (size_t i = 1; i < outputs.size(); ++i) {
    const ir::Tensor& t = spec.tensor(outputs[i]);
    if (t.producer == ir::kNoId) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", t.name, "' is an input of the step, not an update"));
    }
    const ir::Op& op = spec.op(t.producer);
    const auto at = std::find(op.outputs.begin(), op.outputs.end(), outputs[i]) - op.outputs.begin();
    TensorId replaced = ir::kNoId;
    if (op.kind == ir::OpKind::kAdamW) {
      static constexpr int kInputOf[] = {0, 2, 3};  // param', m', v'
      replaced = op.inputs[kInputOf[at]];
    } else if (op.kind == ir::OpKind::kSgd) {
      replaced = op.inputs[0];
    } else if (op.kind == ir::OpKind::kCast) {
      const ir::OpId update = spec.tensor(op.inputs[0]).producer;
      if (update != ir::kNoId && (spec.op(update).kind == ir::OpKind::kAdamW ||
                                  spec.op(update).kind == ir::OpKind::kSgd)) {
        replaced = ir::ParameterOfMaster(spec, spec.op(update).inputs[0]).value_or(ir::kNoId);
      }
    }
    if (replaced == ir::kNoId || spec.tensor(replaced).producer != ir::kNoId) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", t.name, "' is not an optimizer update of a step input, so a run cannot "
          "carry it to the next step"));
    }
    updates.emplace_back(outputs[i], replaced);
  }
  return updates;
}

// Refills the integer data inputs from the stream.
void FillData(const ir::Graph& spec, int64_t bound, TokenStream& stream, Feeds& feeds) {
  for (TensorId id : spec.InputIds()) {
    const ir::Tensor& t = spec.tensor(id);
    if (t.role != ir::TensorRole::kInput || ir::IsFloat(t.dtype)) continue;
    HostTensor& h = feeds[id];
    h = HostTensor(t.shape, t.dtype);
    for (double& x : h.data) x = static_cast<double>(stream.Next(bound));
  }
}

// The logical tensor `t` put together from the plan outputs holding it.
absl::StatusOr<HostTensor> Assemble(const ir::Graph& spec, const Program& program,
                                    const StepResult& step, TensorId t) {
  const ir::Tensor& tensor = spec.tensor(t);
  HostTensor whole(tensor.shape, tensor.dtype);
  HostTensor covered(tensor.shape, ir::DType::kF64);
  for (ValueId v : program.plan.outputs) {
    const ir::PlanValue& pv = program.plan.values[v];
    if (pv.sub.tensor != t || !pv.sub.part.IsFull() || !step.values[v].has_value()) continue;
    std::vector<int64_t> origin;
    for (const ir::Interval& iv : pv.sub.box) origin.push_back(iv.begin);
    const std::vector<int64_t> extents = ir::BoxDims(pv.sub.box);
    const std::vector<int64_t> zeros(extents.size(), 0);
    CopyBlock(*step.values[v], zeros, whole, origin, extents);
    HostTensor ones(ir::Shape(extents), ir::DType::kF64);
    std::fill(ones.data.begin(), ones.data.end(), 1.0);
    CopyBlock(ones, zeros, covered, origin, extents);
  }
  for (int64_t i = 0; i < covered.size(); ++i) {
    if (covered[i] == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the plan's outputs do not cover '", tensor.name, "' (element ", i, " is missing)"));
    }
  }
  return whole;
}

// The step's plan inputs from the logical feeds.
absl::StatusOr<ValueStore> PlanInputs(const ir::Graph& spec, const Program& program,
                                      const Feeds& feeds) {
  ValueStore inputs(program.plan.values.size());
  for (ValueId v : program.inputs) {
    const ir::PlanValue& pv = program.plan.values[v];
    if (pv.sub.part.IsEmpty()) {
      inputs[v] = HostTensor(ir::Shape(ir::BoxDims(pv.sub.box)), pv.dtype);
      continue;
    }
    if (!pv.sub.part.IsFull()) {
      return PlanError(DescribeValue(spec, pv),
                       "is a plan input (nothing produces it) but holds neither the whole "
                       "value nor zeros");
    }
    auto it = feeds.find(pv.sub.tensor);
    if (it == feeds.end()) {
      return PlanError(DescribeValue(spec, pv), "is a plan input of a tensor the step computes");
    }
    HostTensor slice = SliceBox(it->second, pv.sub.box);
    slice.dtype = pv.dtype;
    ScaleBy(slice, pv.sub.scale);
    inputs[v] = std::move(slice);
  }
  return inputs;
}

// Relative difference of `got` from `expected` against `scale`.
double Relative(const HostTensor& got, const HostTensor& expected, double scale) {
  const double err = MaxDiff(got, expected) / scale;
  return std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
}

// Tensors below this fraction of the largest of their role class are measured
// against it. In fp32 a gradient that is zero in exact arithmetic (the key
// bias's: softmax is shift invariant) holds noise of about float epsilon times
// the terms that cancel in it, far above 1e-6 of the largest gradient; the
// attention backward reads the forward's stored fp32 output for each row's
// rowsum(dout * out) (flash attention's), which adds that output's rounding.
double NoiseFloor(ir::DType precision) {
  return precision == ir::DType::kF32 ? 1e-3 : kNoiseFloor;
}

class Comparison {
 public:
  Comparison(const ir::Graph& spec, const ir::TensorValues& reference, double floor)
      : spec_(spec), reference_(reference), floor_(floor), class_scale_(kNumRoleClasses, 0.0) {
    for (const ir::Tensor& t : spec.tensors()) {
      if (!reference[t.id].has_value()) continue;
      double& m = class_scale_[static_cast<int>(ClassOf(t.role))];
      m = std::max(m, MaxAbs(*reference[t.id]));
    }
  }

  double Scale(TensorId t) const {
    const double own = MaxAbs(*reference_[t]);
    const double floor = floor_ * class_scale_[static_cast<int>(ClassOf(spec_.tensor(t).role))];
    return std::max({own, floor, 1e-30});
  }

  // Records `err` in `into` and, when it is the largest so far, as the worst.
  void Note(int step, absl::string_view what, double err, double& into, CheckReport& report,
            double& worst) const {
    into = std::max(into, err);
    if (err > worst) {
      worst = err;
      report.worst = absl::StrFormat("step %d: %s rel %.3g", step, what, err);
    }
  }

 private:
  const ir::Graph& spec_;
  const ir::TensorValues& reference_;
  const double floor_;
  std::vector<double> class_scale_;
};

// Full-part plan values holding the gradients the optimizer applies (its
// `grad` operand): what the check compares. Gradients of activations are left
// out: in fp32 some are sums whose terms cancel (a normalisation's scale), where
// any change of summation order moves the result far more than the precision.
std::vector<ValueId> GradientValues(const ir::Graph& spec, const ir::Plan& plan) {
  absl::flat_hash_set<TensorId> applied;
  for (const ir::Op& op : spec.ops()) {
    if (op.kind == ir::OpKind::kAdamW || op.kind == ir::OpKind::kSgd) applied.insert(op.inputs[1]);
  }
  std::vector<ValueId> out;
  for (const ir::PlanValue& v : plan.values) {
    if (v.sub.part.IsFull() && applied.contains(v.sub.tensor)) out.push_back(v.id);
  }
  return out;
}

std::string Gib(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= double(int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", b / (int64_t{1} << 30));
  if (b >= double(int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / (int64_t{1} << 20));
  return absl::StrFormat("%.1f KiB", b / 1024);
}

// What the run needs at least, known before it allocates: the step's inputs held
// on the host (parameters, optimizer states and a batch, 8 bytes a value; twice
// with the check, whose reference keeps its own copy) and, on the CPU backend,
// whose devices are this process's threads, every device's predicted peak.
absl::Status CheckHostMemory(const ir::Graph& spec, const Program& program,
                             const Backend& backend, const TrainOptions& options) {
  const int64_t limit =
      options.host_memory_bytes > 0 ? options.host_memory_bytes : AvailableHostMemory();
  if (limit <= 0) return absl::OkStatus();
  double state = 0;
  for (TensorId id : spec.InputIds()) {
    state += 8.0 * static_cast<double>(spec.tensor(id).shape.num_elements());
  }
  if (options.check) state *= 2;
  double devices = 0;
  if (backend.name() == "cpu") {
    for (const DeviceProgram& d : program.devices) devices += static_cast<double>(d.peak_bytes);
  }
  const double need = state + devices;
  if (need <= static_cast<double>(limit)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the run needs at least ", Gib(static_cast<int64_t>(need)), " of host memory (the step's "
      "parameters, optimizer states and batch: ", Gib(static_cast<int64_t>(state)),
      options.check ? ", twice for the check" : "",
      backend.name() == "cpu"
          ? absl::StrCat("; the devices' predicted peaks: ", Gib(static_cast<int64_t>(devices)))
          : "",
      "), more than the ", Gib(limit),
      options.host_memory_bytes > 0
          ? " it may use (--memory)"
          : " this machine has available (a plan at its tiny size, --tiny, runs here)"));
}

}  // namespace

int64_t AvailableHostMemory() {
  int64_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const int64_t cap = static_cast<int64_t>(as.rlim_cur);
    available = available > 0 ? std::min(available, cap) : cap;
  }
  return available;
}

absl::StatusOr<TrainReport> RunTraining(const ir::Graph& spec, const ir::Plan& plan,
                                        Backend& backend, const TrainOptions& options) {
  if (options.steps < 1) return absl::InvalidArgumentError("steps must be at least 1");
  if (spec.outputs().empty()) return absl::InvalidArgumentError("the step has no outputs");
  LOOM_ASSIGN_OR_RETURN(auto updates, StateUpdates(spec));
  LowerOptions lower;
  lower.bytes_per_element = ir::DTypeBytes(options.precision);
  std::optional<ir::Plan> expanded;
  const ir::Plan* source = &plan;
  if (plan.is_factored()) {
    LOOM_ASSIGN_OR_RETURN(expanded, ir::ExpandPlan(spec, plan));
    source = &*expanded;
  }
  if (options.check) lower.keep = GradientValues(spec, *source);
  LOOM_ASSIGN_OR_RETURN(Program program, LowerPlan(spec, *source, lower));
  expanded.reset();
  LOOM_RETURN_IF_ERROR(CheckHostMemory(spec, program, backend, options));

  const int64_t bound = SmallestVocabulary(spec).value_or(2);
  absl::flat_hash_map<std::string, int64_t> int_bounds;
  for (TensorId id : spec.InputIds()) {
    if (!ir::IsFloat(spec.tensor(id).dtype)) int_bounds[spec.tensor(id).name] = bound;
  }
  Feeds state = ir::RandomFeeds(spec, options.seed, /*scale=*/0.5, int_bounds);
  Feeds reference_state;  // the reference's own copy, when the run is checked
  if (options.check) reference_state = state;
  LOOM_ASSIGN_OR_RETURN(TokenStream stream, TokenStream::Open(options.data_path, options.seed));

  const TensorId loss = spec.outputs()[0];
  TrainReport report;
  for (const DeviceProgram& d : program.devices) {
    report.predicted_peak_bytes.push_back(d.peak_bytes);
    report.predicted_peak_activation_bytes.push_back(d.peak_activation_bytes);
  }
  if (options.check) report.check.emplace();
  double worst = -1;
  for (int step = 1; step <= options.steps; ++step) {
    Feeds data;
    FillData(spec, bound, stream, data);
    for (auto& [t, h] : data) {
      if (options.check) reference_state[t] = h;
      state[t] = std::move(h);
    }
    LOOM_ASSIGN_OR_RETURN(ValueStore inputs, PlanInputs(spec, program, state));
    LOOM_ASSIGN_OR_RETURN(StepResult result, backend.RunStep(program, std::move(inputs)));
    StepReport sr;
    sr.seconds = result.seconds;
    LOOM_ASSIGN_OR_RETURN(HostTensor loss_value, Assemble(spec, program, result, loss));
    if (loss_value.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the loss '", spec.tensor(loss).name, "' is not a scalar"));
    }
    sr.loss = loss_value[0];
    for (const DeviceStats& d : result.devices) {
      report.matmul.seconds += d.matmul.seconds;
      report.matmul.flops += d.matmul.flops;
    }

    ir::TensorValues reference;
    std::optional<Comparison> comparison;
    if (options.check) {
      ir::InterpreterOptions io;
      io.precision = options.precision;
      LOOM_ASSIGN_OR_RETURN(reference, ir::Evaluate(spec, reference_state, io));
      comparison.emplace(spec, reference, NoiseFloor(options.precision));
      sr.reference_loss = (*reference[loss])[0];
      CheckReport& check = *report.check;
      for (const ir::Op& op : spec.ops()) {
        if (op.kind != ir::OpKind::kClipCoef || !reference[op.outputs[0]].has_value()) continue;
        const double coef = (*reference[op.outputs[0]])[0];
        check.clip_coefficient = std::min(check.clip_coefficient.value_or(coef), coef);
      }
      const double loss_err = Relative(loss_value, *reference[loss], comparison->Scale(loss));
      comparison->Note(step, absl::StrCat("loss '", spec.tensor(loss).name, "'"), loss_err,
                       check.loss, check, worst);
      for (ValueId v : lower.keep) {
        const ir::PlanValue& pv = program.plan.values[v];
        if (!result.values[v].has_value()) continue;
        const double err = Relative(*result.values[v], SliceBox(*reference[pv.sub.tensor], pv.sub.box),
                                    comparison->Scale(pv.sub.tensor));
        ++check.gradients_compared;
        comparison->Note(step, DescribeValue(spec, pv), err, check.gradients, check, worst);
      }
    }
    if (options.check) {
      // Every copy of every output (each replica's parameters, each device's
      // loss): a wrong copy is wrong whichever copy the next step reads.
      CheckReport& check = *report.check;
      for (ValueId v : program.plan.outputs) {
        const ir::PlanValue& pv = program.plan.values[v];
        const TensorId t = pv.sub.tensor;
        if (!pv.sub.part.IsFull() || !result.values[v].has_value() || !reference[t].has_value()) {
          continue;
        }
        const double err = Relative(*result.values[v], SliceBox(*reference[t], pv.sub.box),
                                    comparison->Scale(t));
        if (t == loss) {
          comparison->Note(step, DescribeValue(spec, pv), err, check.loss, check, worst);
          continue;
        }
        ++check.parameters_compared;
        comparison->Note(step, DescribeValue(spec, pv), err, check.parameters, check, worst);
      }
    }
    for (const auto& [updated, input] : updates) {
      LOOM_ASSIGN_OR_RETURN(HostTensor next, Assemble(spec, program, result, updated));
      if (options.check) reference_state[input] = *reference[updated];
      state[input] = std::move(next);
    }
    report.steps.push_back(sr);
    report.devices = std::move(result.devices);
  }
  return report;
}

absl::StatusOr<absl::flat_hash_map<TensorId, HostTensor>> RunStepOnValues(
    const ir::Graph& spec, const ir::Plan& plan, Backend& backend,
    const absl::flat_hash_map<TensorId, HostTensor>& feeds) {
  std::optional<ir::Plan> expanded;
  const ir::Plan* source = &plan;
  if (plan.is_factored()) {
    LOOM_ASSIGN_OR_RETURN(expanded, ir::ExpandPlan(spec, plan));
    source = &*expanded;
  }
  LOOM_ASSIGN_OR_RETURN(Program program, LowerPlan(spec, *source));
  expanded.reset();
  LOOM_ASSIGN_OR_RETURN(ValueStore inputs, PlanInputs(spec, program, feeds));
  LOOM_ASSIGN_OR_RETURN(StepResult step, backend.RunStep(program, std::move(inputs)));
  absl::flat_hash_map<TensorId, HostTensor> out;
  for (TensorId t : spec.outputs()) {
    LOOM_ASSIGN_OR_RETURN(out[t], Assemble(spec, program, step, t));
  }
  return out;
}

}  // namespace loom::exec
