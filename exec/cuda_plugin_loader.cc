// Finds and loads the CUDA plugin (exec/cuda_plugin.h) on first use, and routes
// the CUDA entry points of exec/backend.h and exec/device_query.h through it.

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "exec/backend.h"
#include "exec/cuda_plugin.h"
#include "exec/device_query.h"
#include "ir/status_macros.h"

// Set by exec/CMakeLists.txt.
#ifndef LOOM_CUDA_PLUGIN_BUILT
#define LOOM_CUDA_PLUGIN_BUILT 0
#endif
#ifndef LOOM_CUDA_PLUGIN_INSTALL_PATH
#define LOOM_CUDA_PLUGIN_INSTALL_PATH ""
#endif
#ifndef LOOM_CUDA_PLUGIN_BUILD_PATH
#define LOOM_CUDA_PLUGIN_BUILD_PATH ""
#endif

namespace loom::exec {
namespace {

constexpr char kPluginFile[] = "libloom_cuda.so";
constexpr char kNoCuda[] = "this build of Loom has no CUDA backend";

// Where the plugin may lie, in the order exec/cuda_plugin.h gives.
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&LoadCudaPlugin), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) {
      paths.push_back((self.parent_path() / kPluginFile).string());
      paths.push_back((self.parent_path().parent_path() / "lib" / kPluginFile).string());
    }
  }
  for (const char* p : {LOOM_CUDA_PLUGIN_INSTALL_PATH, LOOM_CUDA_PLUGIN_BUILD_PATH}) {
    if (*p != '\0') paths.push_back(p);
  }
  return paths;
}

absl::StatusOr<const CudaPlugin*> Open(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(absl::StrCat("the CUDA plugin ", path, " cannot be loaded: ",
                                               why != nullptr ? why : "unknown reason"));
  }
  // Never closed: backends made by the plugin run its code until the process ends.
  using Entry = const CudaPlugin* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "LoomCudaPlugin"));
  if (entry == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("the CUDA plugin ", path, " has no entry point LoomCudaPlugin"));
  }
  const CudaPlugin* plugin = entry();
  if (plugin == nullptr || !(plugin->stamp == CudaPluginStamp{})) {
    return absl::UnavailableError(absl::StrCat(
        "the CUDA plugin ", path,
        " comes from another build of Loom (its interface differs); use the one built with "
        "this program"));
  }
  return plugin;
}

absl::StatusOr<const CudaPlugin*> Load() {
  if (!LOOM_CUDA_PLUGIN_BUILT) return absl::UnimplementedError(kNoCuda);
  if (const char* forced = std::getenv("LOOM_CUDA_PLUGIN"); forced != nullptr && *forced) {
    return Open(forced);
  }
  std::vector<std::string> looked;
  for (const std::string& path : Candidates()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return Open(path);
    looked.push_back(path);
  }
  return absl::UnavailableError(
      absl::StrCat("the CUDA plugin ", kPluginFile, " was not found (looked at ",
                   absl::StrJoin(looked, ", "), "); set LOOM_CUDA_PLUGIN to its path"));
}

}  // namespace

absl::StatusOr<const CudaPlugin*> LoadCudaPlugin() {
  static const auto* const loaded = new absl::StatusOr<const CudaPlugin*>(Load());
  return *loaded;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const ExecOptions& options) {
  absl::StatusOr<const CudaPlugin*> plugin = LoadCudaPlugin();
  if (!plugin.ok()) return absl::UnavailableError(plugin.status().message());
  return (*plugin)->make_backend(options);
}

absl::StatusOr<std::vector<ir::HostTensor>> RunTaskOnCuda(
    const ir::Task& task, absl::Span<const ir::HostTensor* const> in, ir::DType precision,
    bool* on_gpu) {
  absl::StatusOr<const CudaPlugin*> plugin = LoadCudaPlugin();
  if (!plugin.ok()) return absl::UnavailableError(plugin.status().message());
  return (*plugin)->run_task(task, in, precision, on_gpu);
}

bool BuiltWithCuda() { return LOOM_CUDA_PLUGIN_BUILT; }

absl::StatusOr<int> CudaDeviceCount() {
  LOOM_ASSIGN_OR_RETURN(const CudaPlugin* plugin, LoadCudaPlugin());
  return plugin->device_count();
}

absl::StatusOr<std::string> NcclVersion() {
  LOOM_ASSIGN_OR_RETURN(const CudaPlugin* plugin, LoadCudaPlugin());
  return plugin->nccl_version();
}

absl::Status CudaSmokeTest() {
  LOOM_ASSIGN_OR_RETURN(const CudaPlugin* plugin, LoadCudaPlugin());
  return plugin->smoke_test();
}

}  // namespace loom::exec
