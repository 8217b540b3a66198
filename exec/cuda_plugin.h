#ifndef LOOM_EXEC_CUDA_PLUGIN_H_
#define LOOM_EXEC_CUDA_PLUGIN_H_

// The CUDA/NCCL backend is a plugin, libloom_cuda.so, loaded at run time and only
// when a CUDA entry point is first called (MakeBackend("cuda"), RunTaskOnCuda,
// the device queries of exec/device_query.h). Programs therefore neither link
// nor load cudart, cuBLAS or NCCL until they are asked to run on a GPU, and a
// binary built with CUDA starts on a machine without those libraries.
//
// The plugin holds its own copies of Loom's libraries (their symbols are local
// to it) and exports one C function, LoomCudaPlugin, that returns the table
// below. The table passes C++ types, so the plugin must come from the same build
// as the program: the loader compares the layout stamp before it uses anything.
//
// Where the loader looks, the first plugin of this build wins (one of another build
// is passed over):
//   $LOOM_CUDA_PLUGIN                  (a path; then nowhere else)
//   <dir>/libloom_cuda.so, <dir>/../lib/libloom_cuda.so
//                                      (<dir>: the folder of the binary or shared
//                                       object that holds the loader, e.g. bin/ of
//                                       an install)
//   the build tree, then the install prefix's lib/
// The plugin finds cudart, cuBLAS and NCCL through the paths it was linked with
// and the dynamic loader's search path (LD_LIBRARY_PATH).

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/backend.h"
#include "exec/program.h"
#include "ir/host_tensor.h"
#include "ir/plan.h"

namespace loom::exec {

// Bumped whenever CudaPlugin changes.
inline constexpr int kCudaPluginVersion = 1;

// Set by exec/CMakeLists.txt for the loader and the plugin alike: a value drawn when
// the build is configured, so that a plugin of another build is never taken for
// this one's (the sizes below would not tell a renumbered enum).
#ifndef LOOM_BUILD_ID
#define LOOM_BUILD_ID "unset"
#endif

// What the loader and the plugin must agree on, compiled into each.
struct CudaPluginStamp {
  const char* build_id = LOOM_BUILD_ID;
  int version = kCudaPluginVersion;
  size_t exec_options = sizeof(ExecOptions);
  size_t step_result = sizeof(StepResult);
  size_t program = sizeof(Program);
  size_t task = sizeof(ir::Task);
  size_t host_tensor = sizeof(ir::HostTensor);
  size_t status = sizeof(absl::Status);
  size_t string = sizeof(std::string);
};

inline bool operator==(const CudaPluginStamp& a, const CudaPluginStamp& b) {
  return std::string_view(a.build_id) == std::string_view(b.build_id) && a.version == b.version && a.exec_options == b.exec_options &&
         a.step_result == b.step_result && a.program == b.program && a.task == b.task &&
         a.host_tensor == b.host_tensor && a.status == b.status && a.string == b.string;
}

struct CudaPlugin {
  CudaPluginStamp stamp;
  // The entry points of exec/backend.h and exec/device_query.h, as the plugin
  // implements them.
  absl::StatusOr<std::unique_ptr<Backend>> (*make_backend)(const ExecOptions& options);
  absl::StatusOr<std::vector<ir::HostTensor>> (*run_task)(
      const ir::Task& task, absl::Span<const ir::HostTensor* const> in, ir::DType precision,
      bool* on_gpu);
  absl::StatusOr<int> (*device_count)();
  absl::StatusOr<std::string> (*nccl_version)();
  absl::Status (*smoke_test)();
};

// The plugin, loaded on the first call (and kept for the life of the process).
// Unimplemented in a build without the CUDA backend; Unavailable, saying where
// it looked and why, when the plugin cannot be found or loaded.
absl::StatusOr<const CudaPlugin*> LoadCudaPlugin();

}  // namespace loom::exec

// The plugin's one exported symbol.
extern "C" const loom::exec::CudaPlugin* LoomCudaPlugin();

#endif  // LOOM_EXEC_CUDA_PLUGIN_H_
