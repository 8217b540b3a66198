// The CUDA backend: one host thread per plan device, each on its GPU (plan
// device d on GPU d mod the GPU count), a compute stream and a communication
// stream per device synchronised by events, cuBLAS and CUDA kernels for the ops
// (exec/cuda/cuda_ops.h; an op without a CUDA kernel runs its reference kernel
// on the host), NCCL for every collective and send/recv when each plan device
// has a GPU of its own, the host rendezvous (staged copies) when several plan
// devices share one. Before anything is launched the program's collective order
// is checked (exec/program.h), since NCCL would hang on a mismatch.

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "exec/backend.h"
#include "exec/cpu_kernels.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/entry_points.h"
#include "exec/host_ops.h"
#include "exec/launch.h"
#include "exec/rendezvous.h"
#include "ir/collective_semantics.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;
using cuda::DeviceTensor;
using ir::Collective;
using ir::CollectiveKind;
using ir::HostTensor;
using ir::ValueId;

absl::Status NcclError(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": NCCL error ", static_cast<int>(r), " (",
                                          ncclGetErrorString(r), ")"));
}

#define LOOM_CUDA_OK(expr, what) LOOM_RETURN_IF_ERROR(cuda::CudaError((expr), (what)))
#define LOOM_NCCL_OK(expr, what) LOOM_RETURN_IF_ERROR(NcclError((expr), (what)))

// A buffer in one GPU's memory.
struct Buffer {
  void* data = nullptr;
  std::vector<int64_t> dims;
  ir::DType dtype = ir::DType::kF32;
  cudaEvent_t ready = nullptr;  // recorded on the communication stream, when pending
};

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

DeviceTensor View(const Buffer& b, bool f64) {
  DeviceTensor t;
  t.data = b.data;
  t.f64 = f64;
  t.rank = static_cast<int>(b.dims.size());
  for (int i = 0; i < t.rank && i < cuda::kMaxRank; ++i) t.dims[i] = b.dims[i];
  return t;
}

// Per plan device: its GPU, streams and cuBLAS handle, kept across steps.
struct DeviceContext {
  int gpu = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cublasHandle_t blas = nullptr;
};

class CudaBackend : public Backend {
 public:
  CudaBackend(const ExecOptions& options, int gpus, std::unique_ptr<TcpStore> store)
      : options_(options), gpus_(gpus), store_(std::move(store)) {}
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  absl::StatusOr<StepResult> RunStep(const Program& program, ValueStore inputs) override;

 private:
  bool f64() const { return options_.precision == ir::DType::kF64; }
  size_t ElementBytes() const { return f64() ? sizeof(double) : sizeof(float); }
  absl::Status Prepare(const Program& program);
  absl::Status CreateCommunicators(const Program& program);
  absl::Status RunDevice(const Program& program, int64_t d, const ValueStore& inputs,
                         std::vector<Buffer>& buffers, Rendezvous& rendezvous,
                         DeviceStats& stats);
  absl::Status RunTask(const ir::Task& t, int64_t d, std::vector<Buffer>& buffers,
                       DeviceStats& stats, MemoryMeter& meter);
  absl::Status NcclCollective(const Collective& c, int64_t d, std::vector<Buffer>& buffers,
                              MemoryMeter& meter, DeviceStats& stats);
  absl::Status StagedCollective(const Collective& c, int64_t d, std::vector<Buffer>& buffers,
                                Rendezvous& rendezvous, MemoryMeter& meter, DeviceStats& stats);
  absl::StatusOr<Buffer> Allocate(int64_t d, std::vector<int64_t> dims, ir::DType dtype);
  absl::Status Upload(int64_t d, const HostTensor& h, Buffer& b);
  absl::StatusOr<HostTensor> Download(int64_t d, const Buffer& b);

  ExecOptions options_;
  int gpus_;
  const ir::Plan* program_plan_ = nullptr;  // of the step running
  std::vector<DeviceContext> devices_;
  // Per device: events recorded during the step, destroyed at its end.
  std::vector<std::vector<cudaEvent_t>> pending_events_;
  bool nccl_ = false;
  // Communicators per matching group (exec/rendezvous.h MatchKey), one per member.
  std::map<std::vector<int64_t>, std::vector<ncclComm_t>> comms_;
  // One process per GPU (exec/launch.h): this process runs plan device `rank`
  // only, and the processes meet at the store.
  std::unique_ptr<TcpStore> store_;
  int64_t steps_run_ = 0;
  // Whether this process runs plan device `d`.
  bool Runs(size_t d) const { return store_ == nullptr || static_cast<int>(d) == store_->env().rank; }
  absl::Status ExchangeKept(const Program& program, StepResult& result);
};

CudaBackend::~CudaBackend() {
  for (auto& [key, comms] : comms_) {
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
  for (DeviceContext& d : devices_) {
    cudaSetDevice(d.gpu);
    if (d.blas != nullptr) cublasDestroy(d.blas);
    if (d.compute != nullptr) cudaStreamDestroy(d.compute);
    if (d.comm != nullptr) cudaStreamDestroy(d.comm);
  }
}

// The group a communicator serves: send/recv use one over the two devices in
// ascending order (both directions), every other kind its group in rank order.
std::vector<int64_t> CommKey(const Collective& c) {
  if (c.kind == CollectiveKind::kSendRecv) {
    return {std::min(c.devices[0], c.devices[1]), std::max(c.devices[0], c.devices[1])};
  }
  return c.devices;
}

// The rank of device `d` in a group.
int RankIn(const std::vector<int64_t>& group, int64_t d) {
  return static_cast<int>(std::find(group.begin(), group.end(), d) - group.begin());
}

absl::Status CudaBackend::Prepare(const Program& program) {
  const size_t n = program.devices.size();
  if (devices_.size() != n) {
    if (!comms_.empty()) return absl::FailedPreconditionError("one CUDA backend runs one program");
    if (store_ != nullptr && static_cast<int>(n) != store_->env().world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan has ", n, " devices: launch as many processes (WORLD_SIZE=", n,
          "), one per GPU; this launch has ", store_->env().world_size));
    }
    devices_.resize(n);
    for (size_t d = 0; d < n; ++d) {
      if (!Runs(d)) continue;
      DeviceContext& ctx = devices_[d];
      ctx.gpu = store_ != nullptr ? store_->env().local_rank % gpus_ : static_cast<int>(d % gpus_);
      LOOM_CUDA_OK(cudaSetDevice(ctx.gpu), "cudaSetDevice");
      LOOM_CUDA_OK(cudaStreamCreateWithFlags(&ctx.compute, cudaStreamNonBlocking), "stream");
      LOOM_CUDA_OK(cudaStreamCreateWithFlags(&ctx.comm, cudaStreamNonBlocking), "stream");
      LOOM_RETURN_IF_ERROR(cuda::CublasError(cublasCreate(&ctx.blas), "cublasCreate"));
      LOOM_RETURN_IF_ERROR(
          cuda::CublasError(cublasSetStream(ctx.blas, ctx.compute), "cublasSetStream"));
    }
    nccl_ = store_ != nullptr || static_cast<int>(n) <= gpus_;
    if (nccl_ && store_ == nullptr && n > 1) {
      // NCCL's P2P path within one process touches the peers' buffers directly;
      // stream-ordered pool memory is mapped only for its own GPU until the pool
      // grants the peers access.
      for (size_t g = 0; g < n; ++g) {
        cudaMemPool_t pool;
        LOOM_CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, devices_[g].gpu), "default pool");
        for (size_t p = 0; p < n; ++p) {
          if (devices_[p].gpu == devices_[g].gpu) continue;
          int can = 0;
          LOOM_CUDA_OK(cudaDeviceCanAccessPeer(&can, devices_[p].gpu, devices_[g].gpu),
                       "peer query");
          if (can == 0) continue;  // NCCL does not use P2P between these two
          cudaMemAccessDesc desc{};
          desc.location.type = cudaMemLocationTypeDevice;
          desc.location.id = devices_[p].gpu;
          desc.flags = cudaMemAccessFlagsProtReadWrite;
          LOOM_CUDA_OK(cudaMemPoolSetAccess(pool, &desc, 1), "cudaMemPoolSetAccess");
        }
      }
    }
  }
  if (nccl_) LOOM_RETURN_IF_ERROR(CreateCommunicators(program));
  return absl::OkStatus();
}

// Every communicator up front, in one global order (the collectives' id order),
// each created by all its members inside one NCCL group.
absl::Status CudaBackend::CreateCommunicators(const Program& program) {
  if (store_ != nullptr) {
    // This process's communicators, in the same global order in every process:
    // the group's first device draws the id and the others read it from the store.
    const int64_t me = store_->env().rank;
    for (const Collective& c : program.plan.collectives) {
      const std::vector<int64_t> key = CommKey(c);
      const int r = RankIn(key, me);
      if (comms_.contains(key) || r == static_cast<int>(key.size())) continue;
      std::string name = "loom/nccl";
      for (int64_t d : key) absl::StrAppend(&name, "/", d);
      ncclUniqueId id;
      if (r == 0) {
        LOOM_NCCL_OK(ncclGetUniqueId(&id), "ncclGetUniqueId");
        LOOM_RETURN_IF_ERROR(store_->Set(name, std::string(id.internal, sizeof(id.internal))));
      } else {
        LOOM_ASSIGN_OR_RETURN(std::string bytes, store_->Get(name));
        if (bytes.size() != sizeof(id.internal)) {
          return absl::DataLossError(absl::StrCat("the store holds a malformed id for ", name));
        }
        std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
      }
      LOOM_CUDA_OK(cudaSetDevice(devices_[me].gpu), "cudaSetDevice");
      std::vector<ncclComm_t> comms(key.size(), nullptr);
      LOOM_NCCL_OK(ncclCommInitRank(&comms[r], static_cast<int>(key.size()), id, r),
                   "ncclCommInitRank");
      comms_[key] = std::move(comms);
    }
    return absl::OkStatus();
  }
  for (const Collective& c : program.plan.collectives) {
    const std::vector<int64_t> key = CommKey(c);
    if (comms_.contains(key)) continue;
    ncclUniqueId id;
    LOOM_NCCL_OK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<ncclComm_t> comms(key.size(), nullptr);
    LOOM_NCCL_OK(ncclGroupStart(), "ncclGroupStart");
    for (size_t r = 0; r < key.size(); ++r) {
      LOOM_CUDA_OK(cudaSetDevice(devices_[key[r]].gpu), "cudaSetDevice");
      LOOM_NCCL_OK(ncclCommInitRank(&comms[r], static_cast<int>(key.size()), id,
                                    static_cast<int>(r)),
                   "ncclCommInitRank");
    }
    LOOM_NCCL_OK(ncclGroupEnd(), "ncclGroupEnd (communicator creation)");
    comms_[key] = std::move(comms);
  }
  return absl::OkStatus();
}

absl::StatusOr<Buffer> CudaBackend::Allocate(int64_t d, std::vector<int64_t> dims,
                                             ir::DType dtype) {
  Buffer b;
  b.dims = std::move(dims);
  b.dtype = dtype;
  const size_t bytes = std::max<size_t>(1, Count(b.dims) * ElementBytes());
  const cudaStream_t s = devices_[d].compute;
  LOOM_CUDA_OK(cudaMallocAsync(&b.data, bytes, s), "cudaMallocAsync");
  LOOM_CUDA_OK(cudaMemsetAsync(b.data, 0, bytes, s), "cudaMemsetAsync");
  return b;
}

absl::Status CudaBackend::Upload(int64_t d, const HostTensor& h, Buffer& b) {
  const cudaStream_t s = devices_[d].compute;
  if (f64()) {
    LOOM_CUDA_OK(cudaMemcpyAsync(b.data, h.data.data(), h.data.size() * sizeof(double),
                                 cudaMemcpyHostToDevice, s),
                 "upload");
    return cuda::CudaError(cudaStreamSynchronize(s), "upload");
  }
  std::vector<float> f(h.data.begin(), h.data.end());
  LOOM_CUDA_OK(cudaMemcpyAsync(b.data, f.data(), f.size() * sizeof(float),
                               cudaMemcpyHostToDevice, s),
               "upload");
  return cuda::CudaError(cudaStreamSynchronize(s), "upload");
}

absl::StatusOr<HostTensor> CudaBackend::Download(int64_t d, const Buffer& b) {
  const cudaStream_t s = devices_[d].compute;
  if (b.ready != nullptr) LOOM_CUDA_OK(cudaStreamWaitEvent(s, b.ready, 0), "wait");
  HostTensor h(ir::Shape(b.dims), b.dtype);
  if (f64()) {
    LOOM_CUDA_OK(cudaMemcpyAsync(h.data.data(), b.data, h.data.size() * sizeof(double),
                                 cudaMemcpyDeviceToHost, s),
                 "download");
    LOOM_CUDA_OK(cudaStreamSynchronize(s), "download");
    return h;
  }
  std::vector<float> f(h.data.size());
  LOOM_CUDA_OK(
      cudaMemcpyAsync(f.data(), b.data, f.size() * sizeof(float), cudaMemcpyDeviceToHost, s),
      "download");
  LOOM_CUDA_OK(cudaStreamSynchronize(s), "download");
  h.data.assign(f.begin(), f.end());
  return h;
}

absl::Status CudaBackend::RunTask(const ir::Task& t, int64_t d, std::vector<Buffer>& buffers,
                                  DeviceStats& stats, MemoryMeter& meter) {
  const DeviceContext& ctx = devices_[d];
  std::vector<ir::TensorType> types;
  std::vector<DeviceTensor> in;
  for (ValueId v : t.inputs) {
    Buffer& b = buffers[v];
    if (b.data == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          DescribeTask(t), " reads value ", v, ", which device ", d, " does not hold"));
    }
    if (b.ready != nullptr) LOOM_CUDA_OK(cudaStreamWaitEvent(ctx.compute, b.ready, 0), "wait");
    types.push_back({ir::Shape(b.dims), b.dtype});
    in.push_back(View(b, f64()));
  }
  absl::StatusOr<std::vector<ir::TensorType>> inferred =
      ir::InferOutputTypes(t.kind, types, t.attrs);
  if (!inferred.ok()) return PlanError(DescribeTask(t), inferred.status().message());
  if (inferred->size() != t.outputs.size()) {
    return PlanError(DescribeTask(t), absl::StrCat("has ", t.outputs.size(),
                                                   " outputs, the op computes ",
                                                   inferred->size()));
  }
  for (size_t i = 0; i < inferred->size(); ++i) {
    const ir::PlanValue& pv = program_plan_->values[t.outputs[i]];
    if ((*inferred)[i].shape.dims() != ir::BoxDims(pv.sub.box)) {
      return PlanError(DescribeTask(t),
                       absl::StrCat("computes shape ", (*inferred)[i].shape.ToString(),
                                    " for value ", t.outputs[i], ", whose box is ",
                                    ir::BoxToString(pv.sub.box)));
    }
  }
  std::vector<DeviceTensor> out;
  for (size_t i = 0; i < inferred->size(); ++i) {
    const ir::TensorType& type = (*inferred)[i];
    LOOM_ASSIGN_OR_RETURN(Buffer b, Allocate(d, type.shape.dims(), type.dtype));
    buffers[t.outputs[i]] = b;
    out.push_back(View(b, f64()));
    meter.Hold(t.outputs[i], Count(b.dims));
  }
  cuda::OpContext op_ctx{ctx.compute, ctx.blas};
  absl::Status s = cuda::RunOp(t.kind, t.attrs, in, absl::MakeSpan(out), op_ctx);
  if (absl::IsUnimplemented(s)) {
    // The reference kernel on the host.
    std::vector<HostTensor> host_in;
    for (ValueId v : t.inputs) {
      LOOM_ASSIGN_OR_RETURN(HostTensor h, Download(d, buffers[v]));
      host_in.push_back(std::move(h));
    }
    std::vector<const HostTensor*> ptrs;
    for (const HostTensor& h : host_in) ptrs.push_back(&h);
    std::vector<HostTensor> host_out;
    LOOM_RETURN_IF_ERROR(RunTaskKernel(t, ptrs, options_.precision, host_out, nullptr));
    for (size_t i = 0; i < host_out.size(); ++i) {
      LOOM_RETURN_IF_ERROR(Upload(d, host_out[i], buffers[t.outputs[i]]));
    }
    ++stats.host_ops;
    return absl::OkStatus();
  }
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(DescribeTask(t), ": ", s.message()));
  return absl::OkStatus();
}


// dims as [outer, size of `dim`, inner].
struct Split3 {
  int64_t outer = 1, mid = 1, inner = 1;
};
Split3 SplitAt(const std::vector<int64_t>& dims, int dim) {
  Split3 s;
  for (int i = 0; i < dim; ++i) s.outer *= dims[i];
  s.mid = dims[dim];
  for (size_t i = dim + 1; i < dims.size(); ++i) s.inner *= dims[i];
  return s;
}

absl::Status CudaBackend::NcclCollective(const Collective& c, int64_t d,
                                         std::vector<Buffer>& buffers, MemoryMeter& meter,
                                         DeviceStats& stats) {
  const DeviceContext& ctx = devices_[d];
  const size_t es = ElementBytes();
  const ncclDataType_t type = f64() ? ncclDouble : ncclFloat;
  const std::vector<int64_t> key = CommKey(c);
  ncclComm_t comm = comms_.at(key)[RankIn(key, d)];
  const int rank = RankIn(c.devices, d);
  const int n = static_cast<int>(c.devices.size());
  // The communication stream starts after everything computed so far.
  cudaEvent_t computed;
  LOOM_CUDA_OK(cudaEventCreateWithFlags(&computed, cudaEventDisableTiming), "event");
  LOOM_CUDA_OK(cudaEventRecord(computed, ctx.compute), "event");
  LOOM_CUDA_OK(cudaStreamWaitEvent(ctx.comm, computed, 0), "wait");
  cudaEventDestroy(computed);
  // This device's output, allocated on the compute stream before the wait above
  // would not cover it: allocate, then order the comm stream after it.
  ValueId out_id = ir::kNoId;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (CollectiveOutputDevice(c, i) == d) out_id = c.outputs[i];
  }
  ValueId in_id = ir::kNoId;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (CollectiveInputDevice(c, i) == d) in_id = c.inputs[i];
  }
  Buffer* in = in_id != ir::kNoId ? &buffers[in_id] : nullptr;
  if (in != nullptr && in->ready != nullptr) {
    LOOM_CUDA_OK(cudaStreamWaitEvent(ctx.comm, in->ready, 0), "wait");
  }
  Buffer* out = nullptr;
  if (out_id != ir::kNoId) {
    const ir::PlanValue& pv = program_plan_->values[out_id];
    LOOM_ASSIGN_OR_RETURN(Buffer b, Allocate(d, ir::BoxDims(pv.sub.box), pv.dtype));
    buffers[out_id] = b;
    out = &buffers[out_id];
    meter.Hold(out_id, Count(b.dims));
    cudaEvent_t allocated;
    LOOM_CUDA_OK(cudaEventCreateWithFlags(&allocated, cudaEventDisableTiming), "event");
    LOOM_CUDA_OK(cudaEventRecord(allocated, ctx.compute), "event");
    LOOM_CUDA_OK(cudaStreamWaitEvent(ctx.comm, allocated, 0), "wait");
    cudaEventDestroy(allocated);
  }
  const cudaStream_t s = ctx.comm;
  auto scratch = [&](size_t bytes) -> absl::StatusOr<void*> {
    void* p = nullptr;
    LOOM_CUDA_OK(cudaMallocAsync(&p, std::max<size_t>(bytes, 1), s), "scratch");
    return p;
  };
  // Rows of `width` bytes between pitched buffers: one copy when contiguous, row by
  // row when a pitch exceeds what 2-D copies take (2 GiB), else one 2-D copy.
  auto copy2d = [&](void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t height) -> absl::Status {
    if (height == 1 || (dpitch == width && spitch == width)) {
      return cuda::CudaError(
          cudaMemcpyAsync(dst, src, width * height, cudaMemcpyDeviceToDevice, s), "block copy");
    }
    constexpr size_t kMaxPitch = (size_t{1} << 31) - 1;
    if (dpitch > kMaxPitch || spitch > kMaxPitch) {
      for (size_t r = 0; r < height; ++r) {
        LOOM_CUDA_OK(cudaMemcpyAsync(static_cast<char*>(dst) + r * dpitch,
                                     static_cast<const char*>(src) + r * spitch, width,
                                     cudaMemcpyDeviceToDevice, s),
                     "block copy");
      }
      return absl::OkStatus();
    }
    return cuda::CudaError(
        cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, s),
        "block copy");
  };
  // NCCL is asked for the collective's meaning (ir/collective_semantics.h): its
  // reduction, over the chunks that meaning gives (the packing below follows it).
  const std::vector<int64_t> in_dims =
      ir::BoxDims(program_plan_->values[c.inputs[0]].sub.box);
  absl::StatusOr<ir::CollectiveMeaning> meaning = ir::MeaningOf(c, in_dims);
  if (!meaning.ok()) return PlanError(DescribeCollective(c), meaning.status().message());
  // An average is NCCL's own (the sum times 1/n, the meaning's scale).
  const bool average = meaning->scale == ir::Rational::Of(1, static_cast<int64_t>(c.devices.size()));
  if (!meaning->scale.IsOne() && !average) {
    return PlanError(DescribeCollective(c), "scales its result by other than 1/n");
  }
  const ncclRedOp_t op = meaning->reduce == ir::ReduceOp::kMax ? ncclMax
                         : average                             ? ncclAvg
                                                               : ncclSum;
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      LOOM_NCCL_OK(ncclAllReduce(in->data, out->data, Count(in->dims), type, op, comm, s),
                   "ncclAllReduce");
      break;
    case CollectiveKind::kBroadcast:
      LOOM_NCCL_OK(ncclBroadcast(in != nullptr ? in->data : out->data, out->data,
                                 Count(out->dims), type, 0, comm, s),
                   "ncclBroadcast");
      break;
    case CollectiveKind::kSendRecv:
      if (in != nullptr) {
        LOOM_NCCL_OK(ncclSend(in->data, Count(in->dims), type, RankIn(key, c.devices[1]), comm, s),
                     "ncclSend");
      } else {
        LOOM_NCCL_OK(ncclRecv(out->data, Count(out->dims), type, RankIn(key, c.devices[0]), comm,
                              s),
                     "ncclRecv");
      }
      break;
    case CollectiveKind::kAllGather: {
      const int dim = c.dim < 0 ? c.dim + static_cast<int>(in->dims.size()) : c.dim;
      const Split3 a = SplitAt(in->dims, dim);
      const int64_t chunk = Count(in->dims);
      LOOM_ASSIGN_OR_RETURN(void* gathered, scratch(chunk * n * es));
      LOOM_NCCL_OK(ncclAllGather(in->data, gathered, chunk, type, comm, s), "ncclAllGather");
      for (int j = 0; j < n; ++j) {
        LOOM_RETURN_IF_ERROR(copy2d(static_cast<char*>(out->data) + j * a.mid * a.inner * es,
                                    n * a.mid * a.inner * es,
                                    static_cast<char*>(gathered) + j * chunk * es,
                                    a.mid * a.inner * es, a.mid * a.inner * es, a.outer));
      }
      LOOM_CUDA_OK(cudaFreeAsync(gathered, s), "scratch");
      break;
    }
    case CollectiveKind::kReduceScatter: {
      const int dim = c.dim < 0 ? c.dim + static_cast<int>(in->dims.size()) : c.dim;
      const Split3 a = SplitAt(in->dims, dim);
      const int64_t part = a.mid / n, chunk = a.outer * part * a.inner;
      LOOM_ASSIGN_OR_RETURN(void* packed, scratch(chunk * n * es));
      for (int j = 0; j < n; ++j) {
        LOOM_RETURN_IF_ERROR(copy2d(static_cast<char*>(packed) + j * chunk * es,
                                    part * a.inner * es,
                                    static_cast<char*>(in->data) + j * part * a.inner * es,
                                    a.mid * a.inner * es, part * a.inner * es, a.outer));
      }
      LOOM_NCCL_OK(ncclReduceScatter(packed, out->data, chunk, type, op, comm, s),
                   "ncclReduceScatter");
      LOOM_CUDA_OK(cudaFreeAsync(packed, s), "scratch");
      break;
    }
    case CollectiveKind::kAllToAll: {
      const int rank_in = static_cast<int>(in->dims.size());
      const int dim = c.dim < 0 ? c.dim + rank_in : c.dim;
      const int dim2 = c.dim2 < 0 ? c.dim2 + rank_in : c.dim2;
      const Split3 a = SplitAt(in->dims, dim);
      const int64_t part = a.mid / n, chunk = a.outer * part * a.inner;
      LOOM_ASSIGN_OR_RETURN(void* send, scratch(chunk * n * es));
      LOOM_ASSIGN_OR_RETURN(void* recv, scratch(chunk * n * es));
      for (int j = 0; j < n; ++j) {
        LOOM_RETURN_IF_ERROR(copy2d(static_cast<char*>(send) + j * chunk * es,
                                    part * a.inner * es,
                                    static_cast<char*>(in->data) + j * part * a.inner * es,
                                    a.mid * a.inner * es, part * a.inner * es, a.outer));
      }
      LOOM_NCCL_OK(ncclGroupStart(), "ncclGroupStart");
      for (int p = 0; p < n; ++p) {
        LOOM_NCCL_OK(ncclSend(static_cast<char*>(send) + p * chunk * es, chunk, type, p, comm, s),
                     "ncclSend");
        LOOM_NCCL_OK(ncclRecv(static_cast<char*>(recv) + p * chunk * es, chunk, type, p, comm, s),
                     "ncclRecv");
      }
      LOOM_NCCL_OK(ncclGroupEnd(), "ncclGroupEnd (all_to_all)");
      // Piece j (shape of the input with `dim` divided by n) goes to position j
      // along dim2 of the output.
      std::vector<int64_t> piece = in->dims;
      piece[dim] = part;
      const Split3 b = SplitAt(piece, dim2);
      for (int j = 0; j < n; ++j) {
        LOOM_RETURN_IF_ERROR(copy2d(static_cast<char*>(out->data) + j * b.mid * b.inner * es,
                                    n * b.mid * b.inner * es,
                                    static_cast<char*>(recv) + j * chunk * es,
                                    b.mid * b.inner * es, b.mid * b.inner * es, b.outer));
      }
      LOOM_CUDA_OK(cudaFreeAsync(send, s), "scratch");
      LOOM_CUDA_OK(cudaFreeAsync(recv, s), "scratch");
      break;
    }
  }
  (void)rank;
  // Readers of the output, and frees of the input, wait for this event.
  cudaEvent_t done;
  LOOM_CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");
  LOOM_CUDA_OK(cudaEventRecord(done, s), "event");
  if (out != nullptr) out->ready = done;
  if (in != nullptr) in->ready = done;
  pending_events_[d].push_back(done);
  return absl::OkStatus();
}

absl::Status CudaBackend::StagedCollective(const Collective& c, int64_t d,
                                           std::vector<Buffer>& buffers, Rendezvous& rendezvous,
                                           MemoryMeter& meter, DeviceStats& stats) {
  std::vector<HostTensor> held;
  std::vector<size_t> index;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (CollectiveInputDevice(c, i) != d) continue;
    LOOM_ASSIGN_OR_RETURN(HostTensor h, Download(d, buffers[c.inputs[i]]));
    held.push_back(std::move(h));
    index.push_back(i);
  }
  std::vector<std::pair<size_t, const HostTensor*>> inputs;
  for (size_t k = 0; k < held.size(); ++k) inputs.emplace_back(index[k], &held[k]);
  double waited = 0;
  absl::StatusOr<std::vector<std::pair<size_t, HostTensor>>> got =
      rendezvous.Join(d, static_cast<int32_t>(c.id), std::move(inputs), waited);
  stats.wait_seconds += waited;
  stats.busy_seconds -= waited;
  if (!got.ok()) return absl::OkStatus();  // the rendezvous holds the error
  for (auto& [i, h] : *got) {
    const ir::PlanValue& pv = program_plan_->values[c.outputs[i]];
    LOOM_ASSIGN_OR_RETURN(Buffer b, Allocate(d, ir::BoxDims(pv.sub.box), pv.dtype));
    buffers[c.outputs[i]] = b;
    meter.Hold(c.outputs[i], Count(b.dims));
    LOOM_RETURN_IF_ERROR(Upload(d, h, buffers[c.outputs[i]]));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RunDevice(const Program& program, int64_t d, const ValueStore& inputs,
                                    std::vector<Buffer>& buffers, Rendezvous& rendezvous,
                                    DeviceStats& stats) {
  const DeviceContext& ctx = devices_[d];
  LOOM_CUDA_OK(cudaSetDevice(ctx.gpu), "cudaSetDevice");
  const ir::Plan& plan = program.plan;
  MemoryMeter meter(program, static_cast<int64_t>(ElementBytes()), stats);
  // This device's plan inputs.
  const auto upload_start = Clock::now();
  for (ValueId v : program.inputs) {
    const ir::PlanValue& pv = plan.values[v];
    if (pv.device != d) continue;
    LOOM_ASSIGN_OR_RETURN(Buffer b, Allocate(d, ir::BoxDims(pv.sub.box), pv.dtype));
    buffers[v] = b;
    LOOM_RETURN_IF_ERROR(Upload(d, *inputs[v], buffers[v]));
    meter.Hold(v, Count(b.dims));
  }
  LOOM_CUDA_OK(cudaStreamSynchronize(ctx.compute), "upload");
  stats.upload_seconds = std::chrono::duration<double>(Clock::now() - upload_start).count();
  for (const Instr& instr : program.devices[d].instrs) {
    if (rendezvous.aborted()) return absl::OkStatus();
    const auto start = Clock::now();
    switch (instr.kind) {
      case InstrKind::kTask:
        LOOM_RETURN_IF_ERROR(RunTask(plan.tasks[instr.id], d, buffers, stats, meter));
        break;
      case InstrKind::kCollective: {
        const Collective& c = plan.collectives[instr.id];
        if (nccl_) {
          LOOM_RETURN_IF_ERROR(NcclCollective(c, d, buffers, meter, stats));
        } else {
          LOOM_RETURN_IF_ERROR(StagedCollective(c, d, buffers, rendezvous, meter, stats));
        }
        break;
      }
      case InstrKind::kFree: {
        Buffer& b = buffers[instr.id];
        if (b.data == nullptr) break;
        if (b.ready != nullptr) LOOM_CUDA_OK(cudaStreamWaitEvent(ctx.compute, b.ready, 0), "wait");
        LOOM_CUDA_OK(cudaFreeAsync(b.data, ctx.compute), "cudaFreeAsync");
        meter.Release(instr.id, Count(b.dims));
        b = Buffer{};
        break;
      }
    }
    stats.busy_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  }
  LOOM_CUDA_OK(cudaStreamSynchronize(ctx.comm), "synchronize");
  LOOM_CUDA_OK(cudaStreamSynchronize(ctx.compute), "synchronize");
  return absl::OkStatus();
}

absl::StatusOr<StepResult> CudaBackend::RunStep(const Program& program, ValueStore inputs) {
  const ir::Plan& plan = program.plan;
  LOOM_RETURN_IF_ERROR(CheckCollectiveOrder(program));
  inputs.resize(plan.values.size());
  for (ValueId v : program.inputs) {
    if (!inputs[v].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("no input given for value ", v));
    }
  }
  LOOM_RETURN_IF_ERROR(Prepare(program));
  program_plan_ = &plan;
  const size_t n = program.devices.size();
  pending_events_.assign(n, {});
  std::vector<Buffer> buffers(plan.values.size());
  Rendezvous rendezvous(program, options_.collective_timeout_s);
  StepResult result;
  result.devices.resize(n);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t d = 0; d < n; ++d) {
    if (!Runs(d)) {
      rendezvous.Finish(static_cast<int64_t>(d));
      continue;
    }
    threads.emplace_back([&, d] {
      absl::Status s = RunDevice(program, static_cast<int64_t>(d), inputs, buffers, rendezvous,
                                 result.devices[d]);
      if (!s.ok()) rendezvous.Abort(s);
      rendezvous.Finish(static_cast<int64_t>(d));
    });
  }
  for (std::thread& t : threads) t.join();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  absl::Status status = rendezvous.status();
  if (!status.ok() && nccl_) {
    // Devices that stopped early never issue their half of the collectives the
    // others queued: abort the communicators so those kernels return (the next
    // step creates new ones).
    for (auto& [key, comms] : comms_) {
      for (ncclComm_t c : comms) {
        if (c != nullptr) ncclCommAbort(c);
      }
    }
    comms_.clear();
  }
  result.values.resize(plan.values.size());
  for (ValueId v = 0; v < static_cast<ValueId>(plan.values.size()); ++v) {
    Buffer& b = buffers[v];
    if (b.data == nullptr) continue;
    const int64_t d = plan.values[v].device;
    cudaSetDevice(devices_[d].gpu);
    if (status.ok() && program.kept[v]) {
      absl::StatusOr<HostTensor> h = Download(d, b);
      if (h.ok()) {
        result.values[v] = *std::move(h);
      } else {
        status = h.status();
      }
    }
    if (b.ready != nullptr) cudaStreamWaitEvent(devices_[d].compute, b.ready, 0);
    cudaFreeAsync(b.data, devices_[d].compute);
  }
  for (size_t d = 0; d < n; ++d) {
    if (!Runs(d)) continue;
    cudaSetDevice(devices_[d].gpu);
    cudaStreamSynchronize(devices_[d].compute);
    for (cudaEvent_t e : pending_events_[d]) cudaEventDestroy(e);
  }
  LOOM_RETURN_IF_ERROR(status);
  if (store_ != nullptr) LOOM_RETURN_IF_ERROR(ExchangeKept(program, result));
  ++steps_run_;
  return result;
}

// Every process publishes the kept values of its device and reads the others',
// so that each returns the whole step (the loss, the updated parameters).
absl::Status CudaBackend::ExchangeKept(const Program& program, StepResult& result) {
  const ir::Plan& plan = program.plan;
  const int64_t me = store_->env().rank;
  auto key_at = [&](int64_t step, ValueId v) {
    return absl::StrCat("loom/step/", step, "/value/", v);
  };
  auto key = [&](ValueId v) { return key_at(steps_run_, v); };
  // Every rank has read step s - 2 (it published step s - 1 after reading it):
  // this rank's values of that step can go.
  if (steps_run_ >= 2) {
    for (ValueId v = 0; v < static_cast<ValueId>(plan.values.size()); ++v) {
      if (program.kept[v] && plan.values[v].device == me) {
        LOOM_RETURN_IF_ERROR(store_->Delete(key_at(steps_run_ - 2, v)));
      }
    }
  }
  for (ValueId v = 0; v < static_cast<ValueId>(plan.values.size()); ++v) {
    if (program.kept[v] && plan.values[v].device == me && result.values[v].has_value()) {
      LOOM_RETURN_IF_ERROR(store_->Set(key(v), EncodeTensor(*result.values[v])));
    }
  }
  for (ValueId v = 0; v < static_cast<ValueId>(plan.values.size()); ++v) {
    if (!program.kept[v] || plan.values[v].device == me) continue;
    LOOM_ASSIGN_OR_RETURN(std::string bytes, store_->Get(key(v)));
    LOOM_ASSIGN_OR_RETURN(result.values[v], DecodeTensor(bytes));
  }
  return absl::OkStatus();
}

}  // namespace

namespace cuda {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const ExecOptions& options) {
  int gpus = 0;
  const cudaError_t err = cudaGetDeviceCount(&gpus);
  if (err != cudaSuccess || gpus == 0) {
    return absl::UnavailableError(absl::StrCat("the CUDA backend needs a GPU: ",
                                               NoGpuReason(err, gpus), " (--backend cpu runs "
                                               "the plan without one)"));
  }
  LOOM_ASSIGN_OR_RETURN(std::optional<LaunchEnv> env, LaunchEnvFromEnvironment());
  std::unique_ptr<TcpStore> store;
  if (env.has_value() && env->world_size > 1) {
    LOOM_ASSIGN_OR_RETURN(store, TcpStore::Connect(*env, options.collective_timeout_s));
  }
  return std::make_unique<CudaBackend>(options, gpus, std::move(store));
}

absl::StatusOr<std::vector<HostTensor>> RunTask(const ir::Task& task,
                                                absl::Span<const HostTensor* const> in,
                                                ir::DType precision, bool* on_gpu) {
  // A one-task program on one device.
  Program program;
  ir::Plan& plan = program.plan;
  plan.tasks.push_back(task);
  ir::Task& t = plan.tasks[0];
  t.id = 0;
  t.device = 0;
  t.inputs.clear();
  t.outputs.clear();
  ValueStore inputs;
  for (size_t i = 0; i < in.size(); ++i) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan.values.size());
    v.device = 0;
    v.dtype = in[i]->dtype;
    for (int64_t dim : in[i]->shape.dims()) v.sub.box.push_back(ir::Interval{0, dim});
    plan.values.push_back(v);
    t.inputs.push_back(v.id);
    program.inputs.push_back(v.id);
    inputs.push_back(*in[i]);
  }
  std::vector<ir::TensorType> types;
  for (const HostTensor* h : in) types.push_back({h->shape, h->dtype});
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> outs,
                        ir::InferOutputTypes(task.kind, types, task.attrs));
  for (const ir::TensorType& type : outs) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan.values.size());
    v.device = 0;
    v.dtype = type.dtype;
    for (int64_t dim : type.shape.dims()) v.sub.box.push_back(ir::Interval{0, dim});
    plan.values.push_back(v);
    t.outputs.push_back(v.id);
    plan.outputs.push_back(v.id);
  }
  program.kept.assign(plan.values.size(), 0);
  program.activation.assign(plan.values.size(), 0);
  for (ValueId v : plan.outputs) program.kept[v] = 1;
  program.devices.resize(1);
  program.devices[0].instrs.push_back(Instr{InstrKind::kTask, 0});
  program.bytes_per_element = ir::DTypeBytes(precision);
  ExecOptions options;
  options.precision = precision;
  int gpus = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&gpus); err != cudaSuccess || gpus == 0) {
    return absl::UnavailableError(
        absl::StrCat("the CUDA backend needs a GPU: ", NoGpuReason(err, gpus)));
  }
  CudaBackend single(options, gpus, nullptr);
  Backend* backend = &single;
  inputs.resize(plan.values.size());
  LOOM_ASSIGN_OR_RETURN(StepResult r, backend->RunStep(program, std::move(inputs)));
  if (on_gpu != nullptr) *on_gpu = r.devices[0].host_ops == 0;
  std::vector<HostTensor> out;
  for (ValueId v : plan.outputs) out.push_back(std::move(*r.values[v]));
  return out;
}

}  // namespace cuda
}  // namespace loom::exec
