// The CUDA backend's pieces: NCCL communicators bootstrapped through the runtime's MPI groups.
// One process (a one-rank group): NCCL refuses two ranks on one GPU, and the GPU machines these
// tests meet have one, so the multi-rank paths wait for a multi-GPU machine. Tests that need a
// device skip, visibly, without one; the error path runs everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "runtime/comm.h"
#include "runtime/nccl_comm.h"

namespace foresight::runtime {
namespace {

bool have_device(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return true;
  static_cast<void>(cudaGetLastError());
  *why = e != cudaSuccess ? std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"
                          : "cudaGetDeviceCount returned 0";
  return false;
}

TEST(NcclComm, WithoutADeviceCreationIsAClearError) {
  std::string why;
  if (have_device(&why)) GTEST_SKIP() << "a CUDA device is present: the error path is not reachable here";
  const Comm self;
  auto c = NcclComm::create(self);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("no CUDA device"), std::string::npos) << c.error().message();
}

// Over one rank every collective returns its input: the bootstrap (unique id through the group's
// byte all-gather, ncclCommInitRank) and each call's arguments (counts, in-place offsets) run
// for real, and any NCCL error fails the test.
TEST(NcclComm, OneRankGroupCollectives) {
  std::string why;
  if (!have_device(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Comm self;
  auto c = NcclComm::create(self);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  cudaStream_t stream = nullptr;
  FS_CUDA_CHECK(cudaStreamCreate(&stream));
  const std::size_t n = 1000;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  float *a = nullptr, *b = nullptr;
  FS_CUDA_CHECK(cudaMalloc(&a, n * sizeof(float)));
  FS_CUDA_CHECK(cudaMalloc(&b, n * sizeof(float)));
  FS_CUDA_CHECK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  FS_CUDA_CHECK(cudaMemset(b, 0, n * sizeof(float)));
  c->all_reduce(a, n, stream);
  c->all_gather(a, n, stream);
  c->reduce_scatter(a, b, n, stream);
  FS_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> got_a(n), got_b(n);
  FS_CUDA_CHECK(cudaMemcpy(got_a.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
  FS_CUDA_CHECK(cudaMemcpy(got_b.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_a, host);
  EXPECT_EQ(got_b, host);
  static_cast<void>(cudaFree(a));
  static_cast<void>(cudaFree(b));
  static_cast<void>(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace foresight::runtime
