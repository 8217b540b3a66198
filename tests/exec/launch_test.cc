// One process per GPU: the launcher's environment and the TCP store the
// processes meet at (run here as threads on localhost).

#include "exec/launch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::exec {
namespace {

using ::testing::HasSubstr;

// A port nothing listens on right now.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class LaunchEnvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK"}) {
      ::unsetenv(v);
    }
  }
};

// No launcher: a single process.
TEST_F(LaunchEnvTest, NoLauncherIsASingleProcess) {
  auto env = LaunchEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->has_value());
}

// torchrun's variables.
TEST_F(LaunchEnvTest, ReadsTorchrunVariables) {
  ::setenv("RANK", "5", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "node0", 1);
  ::setenv("MASTER_PORT", "29600", 1);
  auto env = LaunchEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_TRUE(env->has_value());
  EXPECT_EQ((*env)->rank, 5);
  EXPECT_EQ((*env)->world_size, 8);
  EXPECT_EQ((*env)->local_rank, 1);
  EXPECT_EQ((*env)->master_addr, "node0");
  EXPECT_EQ((*env)->master_port, 29600);
}

// Open MPI's mpirun variables.
TEST_F(LaunchEnvTest, ReadsOpenMpiVariables) {
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  auto env = LaunchEnvFromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_TRUE(env->has_value());
  EXPECT_EQ((*env)->rank, 3);
  EXPECT_EQ((*env)->world_size, 4);
  EXPECT_EQ((*env)->local_rank, 3);
}

// A malformed or inconsistent variable is an error naming it.
TEST_F(LaunchEnvTest, MalformedVariablesAreErrors) {
  ::setenv("RANK", "two", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  auto a = LaunchEnvFromEnvironment();
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("RANK='two'"));
  ::setenv("RANK", "4", 1);
  auto b = LaunchEnvFromEnvironment();
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("is not below WORLD_SIZE=4"));
}

// Four ranks exchange values through the store, each reading keys another sets,
// some before they are set.
TEST(TcpStoreTest, RanksExchangeValues) {
  const int port = FreePort();
  const int n = 4;
  std::vector<std::string> got(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      LaunchEnv env;
      env.rank = r;
      env.world_size = n;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      auto store = TcpStore::Connect(env, /*timeout_s=*/10);
      if (!store.ok()) {
        errors[r] = std::string(store.status().message());
        return;
      }
      // Rank r reads rank (r+1)'s key, which may not be set yet.
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      absl::Status set = (*store)->Set("key/" + std::to_string(r), std::string(r + 1, 'a' + r));
      auto value = (*store)->Get("key/" + std::to_string((r + 1) % n));
      if (!set.ok() || !value.ok()) {
        errors[r] = "exchange failed";
        return;
      }
      got[r] = *value;
      // Rank 0 serves the store: it stays until everyone has read.
      (void)(*store)->Set("done/" + std::to_string(r), "");
      if (r == 0) {
        for (int k = 0; k < n; ++k) (void)(*store)->Get("done/" + std::to_string(k));
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    const int from = (r + 1) % n;
    EXPECT_EQ(got[r], std::string(from + 1, 'a' + from)) << "rank " << r;
  }
}

// A key no rank sets is reported after the timeout, naming the rank and key.
TEST(TcpStoreTest, MissingKeyTimesOut) {
  LaunchEnv env;
  env.master_port = FreePort();
  auto store = TcpStore::Connect(env, /*timeout_s=*/0.3);
  ASSERT_TRUE(store.ok()) << store.status();
  const auto start = std::chrono::steady_clock::now();
  auto value = (*store)->Get("never/set");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(value.status().message(), HasSubstr("rank 0 of 1"));
  EXPECT_THAT(value.status().message(), HasSubstr("'never/set'"));
}

// A deleted key is gone: a later Get times out, and the failed request drops the
// connection so that no late answer is taken for another request's.
TEST(TcpStoreTest, DeletedKeysAreGone) {
  LaunchEnv env;
  env.master_port = FreePort();
  auto store = TcpStore::Connect(env, /*timeout_s=*/0.3);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  auto got = (*store)->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  ASSERT_TRUE((*store)->Delete("k").ok());
  EXPECT_FALSE((*store)->Get("k").ok());
  auto after = (*store)->Set("k", "w");
  ASSERT_FALSE(after.ok());
  EXPECT_THAT(after.message(), HasSubstr("lost earlier"));
}

// No store to reach: an error, not a hang.
TEST(TcpStoreTest, UnreachableStoreIsAnError) {
  LaunchEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_port = FreePort();
  auto store = TcpStore::Connect(env, /*timeout_s=*/0.3);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("could not reach the store"));
}

// Tensors survive the trip through the store's bytes.
TEST(TcpStoreTest, TensorsRoundTrip) {
  ir::HostTensor t(ir::Shape({2, 3}), ir::DType::kF32);
  for (int i = 0; i < 6; ++i) t[i] = 0.25 * i - 1;
  auto back = DecodeTensor(EncodeTensor(t));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape.dims(), t.shape.dims());
  EXPECT_EQ(back->dtype, t.dtype);
  EXPECT_EQ(back->data, t.data);
  EXPECT_FALSE(DecodeTensor("xy").ok());
}

}  // namespace
}  // namespace loom::exec
