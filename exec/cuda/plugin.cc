// The plugin's one exported symbol (exec/cuda_plugin.h): the table of its entry
// points. Everything else in libloom_cuda.so is local to it.

#include "exec/cuda/entry_points.h"
#include "exec/cuda_plugin.h"

extern "C" __attribute__((visibility("default"))) const loom::exec::CudaPlugin* LoomCudaPlugin() {
  namespace cuda = loom::exec::cuda;
  static const loom::exec::CudaPlugin plugin = {
      loom::exec::CudaPluginStamp{}, &cuda::MakeBackend, &cuda::RunTask,
      &cuda::DeviceCount,            &cuda::NcclVersion, &cuda::SmokeTest,
  };
  return &plugin;
}
