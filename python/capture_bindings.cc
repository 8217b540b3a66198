// Functions of loom._loom that loom.torch (python/loom/torch) builds on: graphs
// and plans from text, the partition signature of an op, and one step of a graph
// or of a plan on given values. Values travel as NumPy arrays (float64; integer
// and bool tensors hold exact integers, as the reference kernels' do).

#include "python/capture_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exec/backend.h"
#include "exec/training.h"
#include "ir/collective_semantics.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "ir/text_format.h"
#include "verify/homogeneity.h"

namespace py = pybind11;

namespace loom::python {
namespace {

using Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A Python attribute value: int, float, list of ints or str.
ir::AttrValue ToAttr(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return static_cast<int64_t>(v.cast<bool>());
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    return v.cast<std::vector<int64_t>>();
  }
  throw py::value_error(absl::StrCat("attribute '", name,
                                     "': expected an int, a float, a list of ints or a str"));
}

ir::AttrMap ToAttrMap(const py::dict& attrs) {
  ir::AttrMap map;
  for (auto [k, v] : attrs) {
    const std::string name = k.cast<std::string>();
    map.Set(name, ToAttr(name, v));
  }
  return map;
}

ir::HostTensor ToHost(const std::string& name, const ir::Tensor& tensor, const py::handle& value) {
  Array a = Array::ensure(value);
  if (!a) throw py::value_error(absl::StrCat("value of '", name, "' is not an array"));
  std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
  if (dims != tensor.shape.dims()) {
    throw py::value_error(absl::StrCat("value of '", name, "' has dims [",
                                       absl::StrJoin(dims, ","), "], the tensor is ",
                                       tensor.type().ToString()));
  }
  ir::HostTensor h(tensor.shape, tensor.dtype);
  std::copy(a.data(), a.data() + a.size(), h.data.begin());
  return h;
}

py::array ToArray(const ir::HostTensor& h) {
  std::vector<py::ssize_t> shape(h.shape.dims().begin(), h.shape.dims().end());
  py::array_t<double> a(shape);
  std::copy(h.data.begin(), h.data.end(), a.mutable_data());
  return a;
}

// Feeds by tensor id from a dict of tensor name -> array.
absl::flat_hash_map<ir::TensorId, ir::HostTensor> ToFeeds(const ir::Graph& g,
                                                           const py::dict& feeds) {
  absl::flat_hash_map<ir::TensorId, ir::HostTensor> out;
  for (auto [k, v] : feeds) {
    const std::string name = k.cast<std::string>();
    std::optional<ir::TensorId> id = g.FindTensor(name);
    if (!id.has_value()) throw py::value_error(absl::StrCat("no tensor '", name, "' in the step"));
    out[*id] = ToHost(name, g.tensor(*id), v);
  }
  return out;
}

const char* KindName(ir::DimKind k) {
  switch (k) {
    case ir::DimKind::kSpatial:
      return "spatial";
    case ir::DimKind::kReduction:
      return "reduction";
    case ir::DimKind::kMaxReduction:
      return "max_reduction";
    case ir::DimKind::kLogSumExpReduction:
      return "logsumexp_reduction";
    case ir::DimKind::kFixed:
      return "fixed";
  }
  return "?";
}

}  // namespace

void DefineCaptureFunctions(py::module_& m, void (*raise)(const absl::Status&)) {
  auto check = [raise](auto statusor) {
    if (!statusor.ok()) raise(statusor.status());
    return *std::move(statusor);
  };
  m.def(
      "parse_step",
      [check](const std::string& text, const std::string& origin) {
        return check(ir::ParseGraph(text, origin));
      },
      py::arg("text"), py::arg("origin") = "<graph>",
      "A Step from graph text IR; `origin` names it in errors.");
  m.def(
      "parse_plan",
      [check](const std::string& text, const std::string& origin) {
        return check(ir::PlanFromJson(text, origin));
      },
      py::arg("text"), py::arg("origin") = "<plan>",
      "A Plan from plan JSON text; `origin` names it in errors.");
  m.def(
      "signature",
      [check](const std::string& kind_name, const std::vector<std::pair<std::vector<int64_t>,
                                                                        std::string>>& inputs,
              const py::dict& attrs) {
        const ir::OpKind kind = check(ir::ParseOpKind(kind_name));
        std::vector<ir::TensorType> types;
        for (const auto& [dims, dtype] : inputs) {
          types.push_back(ir::TensorType{ir::Shape(dims), check(ir::ParseDType(dtype))});
        }
        const ir::AttrMap map = ToAttrMap(attrs);
        check(ir::InferOutputTypes(kind, types, map));
        const ir::DimSignature sig = check(ir::GetOpSchema(kind).signature(types, map));
        py::dict kinds;
        for (const auto& [label, k] : sig.kinds) kinds[py::str(label)] = KindName(k);
        py::dict out;
        out["inputs"] = sig.inputs;
        out["outputs"] = sig.outputs;
        out["kinds"] = kinds;
        out["coupled"] = sig.coupled;
        out["additive"] = sig.additive_inputs;
        return out;
      },
      py::arg("kind"), py::arg("inputs"), py::arg("attrs") = py::dict(),
      "The partition signature of op `kind` on inputs of the given (dims, dtype): "
      "{'inputs': [[labels]], 'outputs': [[labels]], 'kinds': {label: 'spatial' | "
      "'reduction' | 'max_reduction' | 'fixed'}, 'coupled': [[labels]], 'additive': [i]}.");
  m.def(
      "scale_of_piece",
      [check](const std::string& kind_name,
              const std::vector<std::pair<std::vector<int64_t>, std::string>>& inputs,
              const py::dict& attrs, const std::vector<std::pair<int64_t, int64_t>>& factors,
              const std::vector<bool>& zeros, const std::vector<int64_t>& members) {
        const ir::OpKind kind = check(ir::ParseOpKind(kind_name));
        std::vector<ir::TensorType> types;
        for (const auto& [dims, dtype] : inputs) {
          types.push_back(ir::TensorType{ir::Shape(dims), check(ir::ParseDType(dtype))});
        }
        const std::vector<ir::TensorType> out =
            check(ir::InferOutputTypes(kind, types, ToAttrMap(attrs)));
        if (factors.size() != types.size() || zeros.size() != types.size()) {
          throw py::value_error("one factor and one zero flag per input");
        }
        std::vector<ir::Rational> k;
        for (const auto& [num, den] : factors) {
          if (den == 0) throw py::value_error("a factor with denominator 0");
          k.push_back(ir::Rational::Of(num, den));
        }
        std::vector<char> z(zeros.begin(), zeros.end());
        if (!members.empty()) {
          if (members.size() != types.size()) throw py::value_error("one member count per input");
          k = verify::EvenShareFactors(kind, types, out, k, z, members).factor;
        }
        const verify::PieceScale scale = verify::ScaleOfPiece(kind, types, out, k, z);
        py::dict result;
        if (scale.operand >= 0) {
          result["operand"] = scale.operand;
          result["why"] = scale.why;
        } else {
          result["factor"] = py::make_tuple(scale.factor.num, scale.factor.den);
        }
        return result;
      },
      py::arg("kind"), py::arg("inputs"), py::arg("attrs"), py::arg("factors"),
      py::arg("zeros"), py::arg("members") = std::vector<int64_t>{},
      "The factor a piece of op `kind` holds when its inputs (dims, dtype) hold the "
      "given factors ((num, den); `zeros`: inputs holding zeros; `members`, where "
      "given: n for an input holding one of n equal members' shares, 0 for a complete "
      "one, -1 otherwise, so that complete inputs meeting Partial(avg) pieces count as "
      "n times their even share): {'factor': (num, den)}, or {'operand': i, 'why': ...} "
      "where the op is not proportional to scaled input i (verify/homogeneity.h).");
  // Value parts (ir/plan.h ValuePart) as lists of pieces ((lo_num, lo_den), (hi_num,
  // hi_den)): the front end's claims refine them here, as the verifier reads them.
  using Piece = std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>;
  auto to_part = [](const std::vector<Piece>& pieces) {
    ir::ValuePart part = ir::ValuePart::Empty();
    for (const auto& [lo, hi] : pieces) {
      if (lo.second <= 0 || hi.second <= 0) throw py::value_error("a bound with denominator <= 0");
      const ir::ValuePart piece = ir::ValuePart::Full().Refine(ir::Rational::Of(lo.first, lo.second),
                                                               ir::Rational::Of(hi.first, hi.second));
      auto joined = part.Union(piece);
      if (!joined.ok()) throw py::value_error(std::string(joined.status().message()));
      part = *std::move(joined);
    }
    return part;
  };
  auto from_part = [](const ir::ValuePart& part) {
    std::vector<Piece> out;
    for (const ir::ValuePart::Piece& p : part.pieces()) {
      out.push_back({{p.lo.num, p.lo.den}, {p.hi.num, p.hi.den}});
    }
    return out;
  };
  m.def(
      "value_part_share",
      [to_part, from_part](const std::vector<Piece>& part, int64_t k, int64_t n) {
        return from_part(to_part(part).Share(k, n));
      },
      py::arg("part"), py::arg("k"), py::arg("n"),
      "Share k of n of a value part: every piece cut into n equal ones, the k-th kept.");
  m.def(
      "value_part_refine",
      [to_part, from_part](const std::vector<Piece>& part, std::pair<int64_t, int64_t> lo,
                           std::pair<int64_t, int64_t> hi) {
        if (lo.second <= 0 || hi.second <= 0) throw py::value_error("a bound with denominator <= 0");
        return from_part(to_part(part).Refine(ir::Rational::Of(lo.first, lo.second),
                                              ir::Rational::Of(hi.first, hi.second)));
      },
      py::arg("part"), py::arg("lo"), py::arg("hi"),
      "The fraction [lo, hi) of every piece of a value part.");
  m.def(
      "value_part_equal_shares",
      [to_part](const std::vector<Piece>& part) -> std::optional<int64_t> {
        return to_part(part).EqualShareCount();
      },
      py::arg("part"),
      "n where the value part is one of n > 1 equal shares of the whole, else None.");
  m.def(
      "collective_meaning",
      [check](const std::string& kind_name, const std::string& reduce_name, int64_t members,
              int dim, int dim2, const std::vector<int64_t>& input_dims) {
        const ir::CollectiveKind kind = check(ir::ParseCollectiveKind(kind_name));
        ir::ReduceOp reduce;
        if (reduce_name == "sum") {
          reduce = ir::ReduceOp::kSum;
        } else if (reduce_name == "max") {
          reduce = ir::ReduceOp::kMax;
        } else if (reduce_name == "avg") {
          reduce = ir::ReduceOp::kAvg;
        } else {
          throw py::value_error(absl::StrCat("unknown reduce op '", reduce_name,
                                             "' (sum, max or avg)"));
        }
        const ir::CollectiveMeaning meaning =
            check(ir::MeaningOf(kind, reduce, members, dim, dim2, input_dims));
        auto box = [](const ir::Box& b) {
          py::list out;
          for (const ir::Interval& i : b) out.append(py::make_tuple(i.begin, i.end));
          return out;
        };
        py::list moves;
        for (const ir::CollectiveMove& mv : meaning.moves) {
          py::dict d;
          d["target"] = mv.target;
          d["to"] = box(mv.to);
          d["source"] = mv.source;
          d["from"] = box(mv.from);
          moves.append(d);
        }
        py::dict out;
        out["reduce"] = meaning.reduce.has_value()
                            ? py::object(py::str(std::string(ir::ReduceOpName(*meaning.reduce))))
                            : py::object(py::none());
        out["scale"] = py::make_tuple(meaning.scale.num, meaning.scale.den);
        out["output_dims"] = meaning.output_dims;
        out["outputs"] = meaning.outputs;
        out["moves"] = moves;
        return out;
      },
      py::arg("kind"), py::arg("reduce"), py::arg("members"), py::arg("dim"), py::arg("dim2"),
      py::arg("input_dims"),
      "What a collective of `kind` over `members` ranks computes, from ir's one "
      "definition (ir/collective_semantics.h): {'reduce': 'sum' | 'max' | None, 'scale': "
      "(num, den), 'output_dims': [...], 'outputs': n, 'moves': [{'target': i, 'to': "
      "[(begin, end)], 'source': j, 'from': [(begin, end)]}]}.");
  m.def(
      "evaluate",
      [check, raise](const ir::Graph& step, const py::dict& feeds, bool fp64,
              std::optional<std::vector<std::string>> names) {
        absl::flat_hash_map<ir::TensorId, ir::HostTensor> values = ToFeeds(step, feeds);
        ir::InterpreterOptions options;
        options.precision = fp64 ? ir::DType::kF64 : ir::DType::kF32;
        ir::TensorValues all;
        {
          py::gil_scoped_release release;
          absl::StatusOr<ir::TensorValues> r = ir::Evaluate(step, values, options);
          if (!r.ok()) {
            py::gil_scoped_acquire acquire;
            raise(r.status());
          }
          all = *std::move(r);
        }
        std::vector<ir::TensorId> wanted;
        if (names.has_value()) {
          for (const std::string& n : *names) {
            std::optional<ir::TensorId> id = step.FindTensor(n);
            if (!id.has_value()) throw py::value_error(absl::StrCat("no tensor '", n, "'"));
            wanted.push_back(*id);
          }
        } else {
          wanted = step.outputs();
        }
        py::dict out;
        for (ir::TensorId id : wanted) {
          if (all[id].has_value()) out[py::str(step.tensor(id).name)] = ToArray(*all[id]);
        }
        return out;
      },
      py::arg("step"), py::arg("feeds"), py::kw_only(), py::arg("fp64") = true,
      py::arg("names") = std::nullopt,
      "Runs the step with the reference interpreter from `feeds` (tensor name -> array, "
      "every input) and returns the graph's outputs (or the tensors `names`) by name.");
  m.def(
      "run_plan",
      [check, raise](const ir::Graph& step, const ir::Plan& plan, const py::dict& feeds,
              const std::string& backend_name, bool fp64) {
        absl::flat_hash_map<ir::TensorId, ir::HostTensor> values = ToFeeds(step, feeds);
        exec::ExecOptions options;
        options.precision = fp64 ? ir::DType::kF64 : ir::DType::kF32;
        std::unique_ptr<exec::Backend> backend = check(exec::MakeBackend(backend_name, options));
        absl::flat_hash_map<ir::TensorId, ir::HostTensor> outputs;
        {
          py::gil_scoped_release release;
          auto r = exec::RunStepOnValues(step, plan, *backend, values);
          if (!r.ok()) {
            py::gil_scoped_acquire acquire;
            raise(r.status());
          }
          outputs = *std::move(r);
        }
        py::dict out;
        for (ir::TensorId id : step.outputs()) {
          out[py::str(step.tensor(id).name)] = ToArray(outputs.at(id));
        }
        return out;
      },
      py::arg("step"), py::arg("plan"), py::arg("feeds"), py::kw_only(),
      py::arg("backend") = "cpu", py::arg("fp64") = true,
      "One step of `plan` on a backend from `feeds` (tensor name -> array, every tensor a "
      "plan input holds a piece of): the step's outputs by name, put together from the plan's "
      "outputs.");
}

}  // namespace loom::python
