// The extension module `loom._loom`, which the package `loom` (python/loom)
// re-exports: a Pythonic surface over api/loom.h (docs/python.md).
//
// Steps, plans and reports are the library's own types (ir::Graph, ir::Plan,
// verify::VerifyReport, exec::TrainReport), exposed read-only through
// properties; the one call that changes an object is Plan.search (loom.search),
// which orders the plan in place. Every library error is raised with its
// status message unchanged (the text `loom <command>: error:` prints):
// ValueError for bad input (InvalidArgument, NotFound, OutOfRange,
// FailedPrecondition), loom.LoomError, a RuntimeError, for the rest. The long
// calls (building, planning, searching, verifying, running) release the GIL.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/loom.h"
#include "exec/training.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/graph_stats.h"
#include "ir/json_format.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "python/capture_bindings.h"
#include "verify/derive.h"
#include "verify/report.h"
#include "verify/verify.h"

namespace py = pybind11;

namespace loom::python {
namespace {

// loom.LoomError, created when the module is initialised.
PyObject* loom_error = nullptr;

// Raises the Python exception of `status` (which is not OK): ValueError for the
// codes of bad input, loom.LoomError otherwise, with status.message() as the
// message (invalid UTF-8 bytes replaced). Needs the GIL.
[[noreturn]] void ThrowStatus(const absl::Status& status) {
  PyObject* type = loom_error != nullptr ? loom_error : PyExc_RuntimeError;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      type = PyExc_ValueError;
      break;
    default:
      break;
  }
  const absl::string_view message = status.message();
  PyObject* text =
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
  if (text == nullptr) throw py::error_already_set();
  PyErr_SetObject(type, text);
  Py_DECREF(text);
  throw py::error_already_set();
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return *std::move(result);
}

// Runs `f` with the GIL released and returns its result once the GIL is held
// again. `f` must not touch Python objects.
template <typename F>
auto WithoutGil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// Python's repr of a string: 'llama3-8b'.
std::string Repr(const std::string& s) { return py::repr(py::str(s)).cast<std::string>(); }

const char* Bool(bool b) { return b ? "True" : "False"; }

std::string ModelConfigRepr(const ModelConfig& c) {
  return absl::StrCat("ModelConfig(name=", Repr(c.name), ", tiny=", Bool(c.tiny),
                      ", layers=", c.layers, ", batch=", c.batch, ", seq=", c.seq,
                      ", precision=", Repr(std::string(ir::PrecisionName(c.precision))),
                      ", max_grad_norm=", absl::StrFormat("%g", c.max_grad_norm), ")");
}

std::string ParallelConfigRepr(const ParallelConfig& c) {
  return absl::StrCat("ParallelConfig(dp=", c.dp, ", tp=", c.tp, ", pp=", c.pp, ", vpp=", c.vpp,
                      ", ep=", c.ep, ", cp=", c.cp, ", sp=", Bool(c.sp), ", zero=", c.zero,
                      ", microbatches=", c.microbatches, ", recompute=", Bool(c.recompute),
                      ", factored=", Bool(c.factored),
                      c.cp_balanced ? "" : ", cp_balanced=False", ")");
}

// The step a plan records as a dict: the plan file's own object (docs/formats.md).
py::object StepSourceDict(const ir::Plan& plan) {
  if (!plan.step.has_value()) return py::none();
  return py::module_::import("json").attr("loads")(ir::StepSourceJson(*plan.step));
}

bool Equal(const ModelConfig& a, const ModelConfig& b) {
  return a.name == b.name && a.tiny == b.tiny && a.layers == b.layers && a.batch == b.batch &&
         a.seq == b.seq && a.precision == b.precision && a.max_grad_norm == b.max_grad_norm;
}

bool Equal(const ParallelConfig& a, const ParallelConfig& b) {
  return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.vpp == b.vpp && a.ep == b.ep &&
         a.cp == b.cp && a.sp == b.sp && a.zero == b.zero && a.microbatches == b.microbatches &&
         a.recompute == b.recompute && a.factored == b.factored &&
         a.cp_balanced == b.cp_balanced;
}

// A configuration as Python gets it: named `model` when given (over the file's
// name), its architecture keys checked against that model (CheckArchitecture).
TrainConfig Checked(TrainConfig c, const std::string& model) {
  if (!model.empty()) c.model.name = model;
  ThrowIfError(CheckArchitecture(c));
  return c;
}

py::tuple ConfigTuple(const TrainConfig& c) { return py::make_tuple(c.model, c.parallel); }

// "1,234,567".
std::string Grouped(int64_t n) {
  const std::string digits = absl::StrCat(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// A few lines about a step: name, layers, micro-batches, ops, tensors, parameters.
std::string StepSummary(const ir::Graph& g) {
  const ir::GraphStats s = ir::ComputeStats(g);
  auto count = [&s](ir::Phase phase) {
    auto it = s.ops_by_phase.find(phase);
    return it == s.ops_by_phase.end() ? int64_t{0} : it->second;
  };
  std::string out;
  auto line = [&out](absl::string_view name, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("%-15s%s\n", absl::StrCat(name, ":"), value));
  };
  line("step", g.name());
  line("layers", absl::StrCat(s.num_layers));
  line("micro-batches", absl::StrCat(std::max(s.num_microbatches, 1)));
  line("ops", absl::StrCat(s.num_ops, " (forward ", count(ir::Phase::kForward), ", backward ",
                           count(ir::Phase::kBackward), ", optimizer ",
                           count(ir::Phase::kOptimizer), ")"));
  line("tensors", absl::StrCat(s.num_tensors));
  line("parameters", Grouped(s.parameters));
  return out;
}

// The plan's device count: its mesh's, or one more than the largest device an
// item names when the mesh has no axes.
int64_t PlanDevices(const ir::Plan& p) {
  if (!p.mesh.axes().empty()) return p.mesh.num_devices();
  int64_t most = -1;
  for (const ir::PlanValue& v : p.values) most = std::max(most, v.device);
  for (const ir::Task& t : p.tasks) most = std::max(most, t.device);
  for (const ir::Collective& c : p.collectives) {
    for (int64_t d : c.devices) most = std::max(most, d);
  }
  return most + 1;
}

bool PlanScheduled(const ir::Plan& p) {
  if (p.is_factored()) return !p.factored_order.empty();
  return std::any_of(p.order.begin(), p.order.end(),
                     [](const std::vector<ir::PlanStep>& steps) { return !steps.empty(); });
}

std::map<std::string, int64_t> CollectiveCounts(const ir::Plan& p) {
  std::map<std::string, int64_t> counts;
  for (const ir::Collective& c : p.collectives) {
    ++counts[std::string(ir::CollectiveKindName(c.kind))];
  }
  return counts;
}

SearchSummary Search(const ir::Graph& step, ir::Plan& plan, int64_t node_limit, double time_limit,
                     std::optional<int64_t> memory_cap, const std::string& objective) {
  SearchConfig config;
  config.objective = objective;
  config.node_limit = node_limit;
  config.time_limit_seconds = time_limit;
  config.memory_cap = memory_cap;
  return ValueOrThrow(WithoutGil([&] { return SearchSchedule(step, plan, config); }));
}

template <typename T, typename F>
std::vector<T> Collect(const std::vector<exec::StepReport>& steps, F field) {
  std::vector<T> out;
  for (const exec::StepReport& s : steps) out.push_back(field(s));
  return out;
}

}  // namespace

// Defines the module's functions, classes and attributes in `m`.
void DefineModule(py::module_& m) {
  m.doc() =
      "Loom: build a model's training step, plan it over a device mesh, search its "
      "pipeline schedule, prove the plan equivalent to the step, and run it "
      "(docs/python.md).";
  m.attr("__version__") = kApiVersion;

  py::object error = py::reinterpret_steal<py::object>(
      PyErr_NewException("loom.LoomError", PyExc_RuntimeError, nullptr));
  if (!error) throw py::error_already_set();
  loom_error = error.ptr();
  error.inc_ref();  // lives as long as the process: ThrowStatus uses it
  m.attr("LoomError") = error;
  DefineCaptureFunctions(m, ThrowStatus);

  // ---------------------------------------------------------------------------
  py::class_<ModelConfig>(m, "ModelConfig",
                          "The model to build: a name of loom.models(), its tiny size, "
                          "the layer count, batch and sequence length (0: the defaults), and "
                          "the training precision ('fp32' or 'bf16').")
      .def(py::init([](std::string name, bool tiny, int layers, int64_t batch, int64_t seq,
                       const std::string& precision, double max_grad_norm) {
             return ModelConfig{.name = std::move(name),
                                .tiny = tiny,
                                .layers = layers,
                                .batch = batch,
                                .seq = seq,
                                .precision = ValueOrThrow(ir::ParsePrecision(precision)),
                                .max_grad_norm = max_grad_norm};
           }),
           py::arg("name"), py::arg("tiny") = false, py::arg("layers") = 0, py::arg("batch") = 0,
           py::arg("seq") = 0, py::arg("precision") = "fp32", py::arg("max_grad_norm") = 1.0)
      .def_readwrite("name", &ModelConfig::name, "a model of loom.models()")
      .def_readwrite("tiny", &ModelConfig::tiny, "same structure, small dims")
      .def_readwrite("layers", &ModelConfig::layers, "0: the configuration's")
      .def_readwrite("batch", &ModelConfig::batch,
                     "sequences per micro-batch over all replicas; 0: the dp size")
      .def_readwrite("seq", &ModelConfig::seq, "tokens per sequence; 0: the configuration's")
      .def_readwrite("max_grad_norm", &ModelConfig::max_grad_norm,
                     "global gradient-norm clipping threshold of the step; 0: none")
      .def_property(
          "precision",
          [](const ModelConfig& c) { return std::string(ir::PrecisionName(c.precision)); },
          [](ModelConfig& c, const std::string& precision) {
            c.precision = ValueOrThrow(ir::ParsePrecision(precision));
          },
          "'fp32', or 'bf16': Megatron-LM's --bf16 step (bf16 parameters and activations; f32 "
          "main gradients, master weights and Adam moments)")
      .def("__repr__", &ModelConfigRepr)
      .def(
          "__eq__", [](const ModelConfig& a, const ModelConfig& b) { return Equal(a, b); },
          py::is_operator());

  py::class_<ParallelConfig>(m, "ParallelConfig",
                             "How the step is split: data, tensor, pipeline (and virtual), "
                             "expert and context parallel sizes, sequence parallelism, ZeRO stage, "
                             "micro-batches, recomputation, factored plan form.")
      .def(py::init([](int dp, int tp, int pp, int vpp, int ep, bool sp, int zero, int microbatches,
                       bool recompute, bool factored, int cp, bool cp_balanced) {
             return ParallelConfig{.dp = dp,
                                   .tp = tp,
                                   .pp = pp,
                                   .vpp = vpp,
                                   .ep = ep,
                                   .cp = cp,
                                   .cp_balanced = cp_balanced,
                                   .sp = sp,
                                   .zero = zero,
                                   .microbatches = microbatches,
                                   .recompute = recompute,
                                   .factored = factored};
           }),
           py::arg("dp") = 1, py::arg("tp") = 1, py::arg("pp") = 1, py::arg("vpp") = 1,
           py::arg("ep") = 1, py::arg("sp") = false, py::arg("zero") = 0,
           py::arg("microbatches") = 1, py::arg("recompute") = false, py::arg("factored") = true,
           py::arg("cp") = 1, py::arg("cp_balanced") = true)
      .def_readwrite("dp", &ParallelConfig::dp)
      .def_readwrite("tp", &ParallelConfig::tp)
      .def_readwrite("pp", &ParallelConfig::pp)
      .def_readwrite("vpp", &ParallelConfig::vpp, "virtual stages per pipeline stage")
      .def_readwrite("ep", &ParallelConfig::ep, "expert parallelism, within the dp replicas")
      .def_readwrite("cp", &ParallelConfig::cp, "context parallelism")
      .def_readwrite("cp_balanced", &ParallelConfig::cp_balanced,
                     "under cp: the sequence in 2 * cp load-balanced chunks, rank r holding "
                     "chunks r and 2 * cp - 1 - r (Megatron-LM's); False: cp contiguous chunks")
      .def_readwrite("sp", &ParallelConfig::sp, "sequence parallelism over the tp group")
      .def_readwrite("zero", &ParallelConfig::zero, "ZeRO stage over the dp group")
      .def_readwrite("microbatches", &ParallelConfig::microbatches)
      .def_readwrite("recompute", &ParallelConfig::recompute,
                     "whole-layer activation recomputation")
      .def_readwrite("factored", &ParallelConfig::factored, "one scale unit plus replication rules")
      .def("__repr__", &ParallelConfigRepr)
      .def(
          "__eq__", [](const ParallelConfig& a, const ParallelConfig& b) { return Equal(a, b); },
          py::is_operator());

  m.def("models", &ListModels, "The model zoo's names, in order.");

  m.def(
      "load_config",
      [](const std::string& path, const std::string& model) {
        return ConfigTuple(Checked(ValueOrThrow(LoadTrainConfig(path)), model));
      },
      py::arg("path"), py::arg("model") = "",
      "(ModelConfig, ParallelConfig) of a training configuration file: Megatron-LM or NeMo "
      "YAML, or DeepSpeed JSON (*.json). `model` names the zoo model (over the file's "
      "loom_model); the file's architecture keys must agree with it.");
  m.def(
      "parse_config",
      [](const std::string& text, const std::string& origin, const std::string& model) {
        return ConfigTuple(Checked(ValueOrThrow(ParseTrainConfig(text, origin)), model));
      },
      py::arg("text"), py::arg("origin") = "<config>", py::arg("model") = "",
      "load_config of YAML text; `origin` names it in errors.");
  m.def(
      "parse_megatron_args",
      [](const std::string& args, const std::string& origin, const std::string& model) {
        return ConfigTuple(Checked(ValueOrThrow(ParseMegatronArgs(args, origin)), model));
      },
      py::arg("args"), py::arg("origin") = "<megatron args>", py::arg("model") = "",
      "(ModelConfig, ParallelConfig) of a Megatron-LM command line ('--tensor-model-parallel-"
      "size 8 ...', optionally after torchrun and its sizes). `model` names the zoo model: "
      "needed when the arguments describe the architecture (--hidden-size ...), which must "
      "agree with it.");
  m.def(
      "parse_deepspeed_config",
      [](const std::string& json, const std::string& origin, const std::string& model) {
        return ConfigTuple(Checked(ValueOrThrow(ParseDeepSpeedConfig(json, origin)), model));
      },
      py::arg("json"), py::arg("origin") = "<deepspeed config>", py::arg("model") = "",
      "(ModelConfig, ParallelConfig) of a DeepSpeed JSON configuration (the model name is not "
      "in it: give `model`, or set ModelConfig.name).");
  m.def(
      "config_ignored",
      [](const std::string& path, const std::string& model) {
        return Checked(ValueOrThrow(LoadTrainConfig(path)), model).ignored;
      },
      py::arg("path"), py::arg("model") = "",
      "The settings of a configuration file that do not shape the step, as written (what "
      "`loom plan` names as ignored).");

  // ---------------------------------------------------------------------------
  py::class_<ir::Graph>(m, "Step", "A model's whole training step (ir::Graph), read-only.")
      .def_property_readonly("name", &ir::Graph::name)
      .def_property_readonly("num_ops", &ir::Graph::num_ops)
      .def_property_readonly("num_tensors", &ir::Graph::num_tensors)
      .def_property_readonly(
          "parameters",
          [](const ir::Graph& g) { return g.CountElements(ir::TensorRole::kParameter); },
          "elements of the parameter inputs")
      .def("summary", &StepSummary,
           "A few lines: name, layers, micro-batches, ops, tensors, parameters.")
      .def(
          "save",
          [](const ir::Graph& g, const std::string& path) {
            ThrowIfError(ir::SaveGraphFile(g, path));
          },
          py::arg("path"), "Writes the graph: JSON when `path` ends in .json, text IR otherwise.")
      .def("__repr__", [](const ir::Graph& g) {
        return absl::StrCat("<loom.Step ", Repr(g.name()), ": ", g.num_ops(), " ops, ",
                            g.num_tensors(), " tensors>");
      });

  m.def(
      "build_step",
      [](const ModelConfig& model, const ParallelConfig& parallel) {
        return ValueOrThrow(WithoutGil([&] { return BuildStep(model, parallel); }));
      },
      py::arg("model"), py::arg("parallel") = ParallelConfig{},
      "The training step of `model` with `parallel.microbatches` micro-batches (and the "
      "batch defaulting to parallel.dp).");

  // ---------------------------------------------------------------------------
  py::class_<SearchSummary>(m, "SearchSummary", "What a schedule search found (block-model units).")
      .def_readonly("schedule", &SearchSummary::schedule,
                    "the schedule returned: search, a published schedule, list/<rule>, serial, local or exact")
      .def_readonly("period", &SearchSummary::period)
      .def_readonly("period_lower_bound", &SearchSummary::period_lower_bound)
      .def_readonly("makespan", &SearchSummary::makespan)
      .def_readonly("makespan_lower_bound", &SearchSummary::makespan_lower_bound)
      .def_readonly("makespan_optimal", &SearchSummary::makespan_optimal,
                    "proved: the makespan meets its lower bound, or a branch and bound over "
                    "every schedule found none shorter (makespan_proof says which)")
      .def_readonly("makespan_proof", &SearchSummary::makespan_proof,
                    "how the makespan was proved optimal; empty when it was not")
      .def_readonly("objective", &SearchSummary::objective,
                    "what the schedule was chosen by: 'makespan' or 'span'")
      .def_readonly("span", &SearchSummary::span,
                    "the longest device's first start to last end (iterations back to back)")
      .def_readonly("span_lower_bound", &SearchSummary::span_lower_bound,
                    "the most work on one device")
      .def_readonly("span_optimal", &SearchSummary::span_optimal,
                    "proved: the span meets its lower bound")
      .def_readonly("bubble", &SearchSummary::bubble,
                    "idle share over all devices of the makespan")
      .def_readonly("span_bubble", &SearchSummary::span_bubble,
                    "idle share over all devices of the span")
      .def_readonly("peak_memory", &SearchSummary::peak_memory, "per pipeline rank")
      .def_readonly("seconds", &SearchSummary::seconds)
      .def_readonly("svg", &SearchSummary::svg, "the schedule's Gantt chart")
      .def("__repr__", [](const SearchSummary& s) {
        return absl::StrFormat(
            "SearchSummary(schedule='%s', objective='%s', period=%d, period_lower_bound=%d, "
            "makespan=%d, makespan_lower_bound=%d, span=%d, span_lower_bound=%d, bubble=%.4f, "
            "span_bubble=%.4f, peak_memory=[%s])",
            s.schedule, s.objective, s.period, s.period_lower_bound, s.makespan,
            s.makespan_lower_bound, s.span, s.span_lower_bound, s.bubble, s.span_bubble,
            absl::StrJoin(s.peak_memory, ", "));
      });

  py::class_<ir::Plan>(m, "Plan", "A distributed plan (ir::Plan), read-only but for search().")
      .def_property_readonly("model", [](const ir::Plan& p) { return p.model; })
      .def_property_readonly("step", &StepSourceDict,
                             "the step the plan was made from ({'model': 'llama3-8b', 'tiny': "
                             "True, 'layers': 2, ...}), as the plan file records it; None when "
                             "it records none")
      .def_property_readonly(
          "mesh", [](const ir::Plan& p) { return p.mesh.ToString(); }, "\"dp=2 x pp=2 x tp=2\"")
      .def_property_readonly("devices", &PlanDevices)
      .def_property_readonly("num_tasks", [](const ir::Plan& p) { return p.tasks.size(); })
      .def_property_readonly("num_collectives",
                             [](const ir::Plan& p) { return p.collectives.size(); })
      .def_property_readonly("num_values", [](const ir::Plan& p) { return p.values.size(); })
      .def_property_readonly("collective_counts", &CollectiveCounts,
                             "collectives by kind: {\"all_reduce\": 59, ...}")
      .def_property_readonly("factored", &ir::Plan::is_factored)
      .def_property_readonly("scheduled", &PlanScheduled, "whether it has a per-device order")
      .def(
          "save",
          [](const ir::Plan& p, const std::string& path) { ThrowIfError(SavePlan(p, path)); },
          py::arg("path"), "Writes the plan as JSON (as `loom plan` does).")
      .def("copy", [](const ir::Plan& p) { return ir::Plan(p); })
      .def("__copy__", [](const ir::Plan& p) { return ir::Plan(p); })
      .def("__deepcopy__", [](const ir::Plan& p, py::dict) { return ir::Plan(p); })
      .def(
          "search",
          [](ir::Plan& plan, const ir::Graph& step, int64_t node_limit, double time_limit,
             std::optional<int64_t> memory_cap, const std::string& objective) {
            return Search(step, plan, node_limit, time_limit, memory_cap, objective);
          },
          py::arg("step"), py::kw_only(), py::arg("node_limit") = 2'000'000,
          py::arg("time_limit") = 0.0, py::arg("memory_cap") = std::nullopt,
          py::arg("objective") = "makespan",
          "Searches the pipeline order and writes it into this plan (which becomes "
          "explicit and scheduled).")
      .def("__repr__", [](const ir::Plan& p) {
        return absl::StrCat("<loom.Plan ", Repr(p.model), " on ", PlanDevices(p),
                            " devices: ", p.tasks.size(), " tasks, ", p.collectives.size(),
                            " collectives, ", p.is_factored() ? "factored" : "explicit",
                            PlanScheduled(p) ? ", scheduled" : "", ">");
      });

  m.def(
      "make_plan",
      [](const ir::Graph& step, const ParallelConfig& parallel) {
        return ValueOrThrow(WithoutGil([&] { return MakePlan(step, parallel); }));
      },
      py::arg("step"), py::arg("parallel"), "The distributed plan of `step` under `parallel`.");
  m.def(
      "make_plan",
      [](const ModelConfig& model, const ParallelConfig& parallel) {
        return ValueOrThrow(WithoutGil([&] { return MakePlan(model, parallel); }));
      },
      py::arg("model"), py::arg("parallel"),
      "The distributed plan of `model`'s step under `parallel`, recording the step (Plan.step): "
      "step_of(plan) rebuilds it.");
  m.def(
      "step_of",
      [](const ir::Plan& plan) { return ValueOrThrow(WithoutGil([&] { return StepOfPlan(plan); })); },
      py::arg("plan"),
      "The training step a plan records (Plan.step); ValueError when it records none.");
  m.def(
      "load_step", [](const std::string& path) { return ValueOrThrow(ir::LoadGraphFile(path)); },
      py::arg("path"), "Reads a graph file (text IR or JSON), as Step.save writes it.");
  m.def(
      "load_plan", [](const std::string& path) { return ValueOrThrow(LoadPlan(path)); },
      py::arg("path"), "Reads a plan JSON file.");
  m.def("search", &Search, py::arg("step"), py::arg("plan"), py::kw_only(),
        py::arg("node_limit") = 2'000'000, py::arg("time_limit") = 0.0,
        py::arg("memory_cap") = std::nullopt, py::arg("objective") = "makespan",
        "plan.search(step, ...): orders `plan` in place and returns the SearchSummary.");

  // ---------------------------------------------------------------------------
  py::class_<verify::Failure>(m, "Failure",
                              "One place where the plan does not compute what the step does.")
      .def_property_readonly(
          "cls", [](const verify::Failure& f) { return verify::FailureClassName(f.cls); },
          "\"missing_reduction\"")
      .def_property_readonly(
          "cls_words", [](const verify::Failure& f) { return verify::FailureClassWords(f.cls); },
          "\"missing reduction\"")
      .def_property_readonly(
          "group", [](const verify::Failure& f) { return verify::FailureGroup(f); },
          "\"lineage\", \"law\" or \"schedule\"")
      .def_readonly("item", &verify::Failure::item)
      .def_readonly("tensor", &verify::Failure::tensor)
      .def_readonly("box", &verify::Failure::box)
      .def_readonly("part", &verify::Failure::part)
      .def_readonly("devices", &verify::Failure::devices)
      .def_readonly("microbatch", &verify::Failure::microbatch, "-1: none")
      .def_readonly("first_op", &verify::Failure::first_op)
      .def_readonly("message", &verify::Failure::message)
      .def_readonly("counterexample", &verify::Failure::counterexample)
      .def("__repr__", [](const verify::Failure& f) {
        return absl::StrCat("<loom.Failure ", verify::FailureClassName(f.cls), ": ", f.item,
                            f.tensor.empty() ? "" : absl::StrCat(", tensor ", f.tensor), ">");
      });

  py::class_<verify::Undecided>(m, "Undecided", "Something the verifier could not decide.")
      .def_readonly("item", &verify::Undecided::item)
      .def_readonly("reason", &verify::Undecided::reason)
      .def("__repr__", [](const verify::Undecided& u) {
        return absl::StrCat("<loom.Undecided ", u.item, ": ", u.reason, ">");
      });

  py::class_<verify::LawResult>(m, "Law", "The proof of one op kind's partition law.")
      .def_readonly("op_kind", &verify::LawResult::op_kind)
      .def_readonly("key", &verify::LawResult::key)
      .def_readonly("verdict", &verify::LawResult::verdict, "\"proved\", \"refuted\", \"unknown\"")
      .def_readonly("detail", &verify::LawResult::detail)
      .def_readonly("cached", &verify::LawResult::cached)
      .def_readonly("seconds", &verify::LawResult::seconds)
      .def("__repr__", [](const verify::LawResult& l) {
        return absl::StrCat("<loom.Law ", l.op_kind, ": ", l.verdict, l.cached ? " (cached)" : "",
                            ">");
      });

  py::class_<verify::VerifyReport>(m, "Report", "A verification's verdict and findings.")
      .def_property_readonly(
          "verdict", [](const verify::VerifyReport& r) { return verify::VerdictWords(r.verdict); },
          "\"proved equivalent\", \"not equivalent\" or \"undecided\"")
      .def_property_readonly(
          "verdict_name",
          [](const verify::VerifyReport& r) { return verify::VerdictName(r.verdict); },
          "\"equivalent\", \"not_equivalent\" or \"unknown\"")
      .def_property_readonly(
          "exit_code", [](const verify::VerifyReport& r) { return verify::ExitCode(r.verdict); },
          "0, 1 or 2, as `loom verify` exits")
      .def_property_readonly(
          "equivalent",
          [](const verify::VerifyReport& r) { return r.verdict == verify::Verdict::kEquivalent; })
      .def_readonly("failures", &verify::VerifyReport::failures)
      .def_readonly("undecided", &verify::VerifyReport::undecided)
      .def_readonly("laws", &verify::VerifyReport::laws)
      .def_readonly("laws_proved", &verify::VerifyReport::laws_proved)
      .def_readonly("cache_hits", &verify::VerifyReport::cache_hits)
      .def_readonly("items", &verify::VerifyReport::items, "tasks and collectives derived")
      .def_readonly("values", &verify::VerifyReport::values)
      .def_readonly("schedule_checked", &verify::VerifyReport::schedule_checked)
      .def_readonly("peak_bytes", &verify::VerifyReport::peak_bytes,
                    "per device, when the schedule was checked")
      .def_readonly("seconds", &verify::VerifyReport::seconds)
      .def(
          "to_json",
          [](const verify::VerifyReport& r, const std::string& model, const std::string& plan) {
            return VerifyReportJson(r, model, plan);
          },
          py::arg("model") = "", py::arg("plan_path") = "",
          "The report JSON `loom verify --report` writes (docs/formats.md).")
      .def("__repr__", [](const verify::VerifyReport& r) {
        return absl::StrCat("<loom.Report ", verify::VerdictWords(r.verdict), ": ",
                            r.failures.size(), " failures, ", r.undecided.size(), " undecided, ",
                            r.laws_proved, "/", r.laws.size(), " laws proved>");
      });

  m.def(
      "verify",
      [](const ir::Graph& step, const ir::Plan& plan, const std::string& cache_dir,
         unsigned timeout_ms, int threads, std::optional<int64_t> memory_capacity) {
        VerifyConfig config;
        config.cache_dir = cache_dir;
        config.solver_timeout_ms = timeout_ms;
        config.threads = threads;
        config.memory_capacity_bytes = memory_capacity;
        return ValueOrThrow(WithoutGil([&] { return VerifyPlan(step, plan, config); }));
      },
      py::arg("step"), py::arg("plan"), py::kw_only(), py::arg("cache_dir") = "",
      py::arg("timeout_ms") = 10000, py::arg("threads") = 0,
      py::arg("memory_capacity") = std::nullopt,
      "Proves `plan` equivalent to `step`; a not-equivalent or undecided plan is a Report, "
      "not an error.");

  // ---------------------------------------------------------------------------
  py::class_<exec::CheckReport>(m, "Check",
                                "Largest relative differences from the single-device "
                                "reference over all steps.")
      .def_readonly("loss", &exec::CheckReport::loss)
      .def_readonly("gradients", &exec::CheckReport::gradients)
      .def_readonly("parameters", &exec::CheckReport::parameters,
                    "updated parameters and optimizer states")
      .def_readonly("gradients_compared", &exec::CheckReport::gradients_compared)
      .def_readonly("parameters_compared", &exec::CheckReport::parameters_compared)
      .def_readonly("worst", &exec::CheckReport::worst)
      .def_property_readonly(
          "largest",
          [](const exec::CheckReport& c) {
            return std::max({c.loss, c.gradients, c.parameters});
          },
          "max(loss, gradients, parameters)")
      .def("__repr__", [](const exec::CheckReport& c) {
        return absl::StrFormat("Check(loss=%.3g, gradients=%.3g, parameters=%.3g, worst=%s)",
                               c.loss, c.gradients, c.parameters, Repr(c.worst));
      });

  py::class_<exec::TrainReport>(m, "RunReport", "What a run measured.")
      .def_property_readonly("losses",
                             [](const exec::TrainReport& r) {
                               return Collect<double>(r.steps,
                                                      [](const auto& s) { return s.loss; });
                             })
      .def_property_readonly(
          "reference_losses",
          [](const exec::TrainReport& r) -> std::optional<std::vector<double>> {
            if (!r.check.has_value()) return std::nullopt;
            return Collect<double>(r.steps, [](const auto& s) { return s.reference_loss; });
          },
          "per step with check, else None")
      .def_property_readonly("step_seconds",
                             [](const exec::TrainReport& r) {
                               return Collect<double>(r.steps,
                                                      [](const auto& s) { return s.seconds; });
                             })
      .def_property_readonly(
          "peak_bytes",
          [](const exec::TrainReport& r) {
            std::vector<int64_t> out;
            for (const exec::DeviceStats& d : r.devices) out.push_back(d.peak_bytes);
            return out;
          },
          "measured, per device, of the last step")
      .def_readonly("predicted_peak_bytes", &exec::TrainReport::predicted_peak_bytes,
                    "per device, from the lowering")
      .def_readonly("check", &exec::TrainReport::check, "a Check with check=True, else None")
      .def_property_readonly("matmul_flops",
                             [](const exec::TrainReport& r) { return r.matmul.flops; })
      .def_property_readonly("matmul_seconds",
                             [](const exec::TrainReport& r) { return r.matmul.seconds; })
      .def("__repr__", [](const exec::TrainReport& r) {
        std::vector<std::string> losses;
        for (const exec::StepReport& s : r.steps) losses.push_back(absl::StrFormat("%.6f", s.loss));
        return absl::StrCat("<loom.RunReport ", r.steps.size(), " steps, losses [",
                            absl::StrJoin(losses, ", "), "]",
                            r.check.has_value()
                                ? absl::StrFormat(", largest difference %.3g",
                                                  std::max({r.check->loss, r.check->gradients,
                                                            r.check->parameters}))
                                : "",
                            ">");
      });

  m.def(
      "run",
      [](const ir::Graph& step, const ir::Plan& plan, const std::string& backend, int steps,
         bool fp64, bool check, uint64_t seed, const std::string& data_path, double timeout) {
        RunConfig config;
        config.backend = backend;
        config.steps = steps;
        config.fp64 = fp64;
        config.check = check;
        config.seed = seed;
        config.data_path = data_path;
        config.collective_timeout_s = timeout;
        return ValueOrThrow(WithoutGil([&] { return RunPlan(step, plan, config); }));
      },
      py::arg("step"), py::arg("plan"), py::kw_only(), py::arg("backend") = "cpu",
      py::arg("steps") = 1, py::arg("fp64") = false, py::arg("check") = false, py::arg("seed") = 1,
      py::arg("data_path") = "", py::arg("collective_timeout") = 60.0,
      "Runs `steps` training steps of `plan`; with check, beside the single-device "
      "reference.");
}

}  // namespace loom::python

PYBIND11_MODULE(_loom, m) { loom::python::DefineModule(m); }
