// Finds and loads the CUDA plugin (exec/cuda_plugin.h) on first use, and routes
// the CUDA entry points of exec/backend.h and exec/device_query.h through it.

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
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

// The file that holds the loader: the executable (whose name the dynamic linker
// records as argv[0], so it is read from /proc/self/exe) or a shared object.
std::optional<std::filesystem::path> LoaderFile() {
  Dl_info info;
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&LoadCudaPlugin), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) == 0 ||
      map == nullptr) {
    return std::nullopt;
  }
  std::error_code ec;
  std::filesystem::path file = map->l_name != nullptr && map->l_name[0] != '\0'
                                   ? std::filesystem::canonical(map->l_name, ec)
                                   : std::filesystem::canonical("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  return file;
}

// Where the plugin may lie, in the order exec/cuda_plugin.h gives.
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (std::optional<std::filesystem::path> self = LoaderFile()) {
    paths.push_back((self->parent_path() / kPluginFile).string());
    paths.push_back((self->parent_path().parent_path() / "lib" / kPluginFile).string());
  }
  for (const char* p : {LOOM_CUDA_PLUGIN_BUILD_PATH, LOOM_CUDA_PLUGIN_INSTALL_PATH}) {
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
    ::dlclose(handle);
    return absl::UnavailableError(
        absl::StrCat("the CUDA plugin ", path, " has no entry point LoomCudaPlugin"));
  }
  const CudaPlugin* plugin = entry();
  if (plugin == nullptr || !(plugin->stamp == CudaPluginStamp{})) {
    // Nothing of it ran but the table's accessor: it can be closed again.
    ::dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA plugin ", path,
        " comes from another build of Loom; use the one built with this program"));
  }
  return plugin;
}

absl::StatusOr<const CudaPlugin*> Load() {
  if (!LOOM_CUDA_PLUGIN_BUILT) return absl::UnimplementedError(kNoCuda);
  if (const char* forced = std::getenv("LOOM_CUDA_PLUGIN"); forced != nullptr && *forced) {
    return Open(forced);
  }
  // The first plugin of this build; one of another build is passed over, and the
  // first error is kept for the message.
  std::vector<std::string> looked;
  std::optional<absl::Status> first_error;
  for (const std::string& path : Candidates()) {
    std::error_code ec;
    looked.push_back(path);
    if (!std::filesystem::is_regular_file(path, ec)) continue;
    absl::StatusOr<const CudaPlugin*> opened = Open(path);
    if (opened.ok()) return opened;
    if (!first_error.has_value()) first_error = opened.status();
  }
  if (first_error.has_value()) return absl::UnavailableError(first_error->message());
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
