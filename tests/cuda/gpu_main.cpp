// Entry point of shardlab_gpu_tests: runs the Catch2 GPU tests when a GPU is
// usable, and otherwise exits 77 so ctest reports the test as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdio>

#include "strategies/registry.h"

int main(int argc, char* argv[]) {
  // cudaGetDeviceCount can fail (no driver, driver too old) without writing the count.
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("no usable GPU (%s): GPU tests skipped\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  shardlab::register_builtin_strategies();
  return Catch::Session().run(argc, argv);
}
