#ifndef LOOM_EXEC_LAUNCH_H_
#define LOOM_EXEC_LAUNCH_H_

// One process per GPU: where this process stands among those a standard
// launcher started, and the key-value store they meet at.
//
// The launcher is torchrun (or anything that sets its environment: RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or Open MPI's mpirun
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, with
// MASTER_ADDR and MASTER_PORT exported to every rank: mpirun -x MASTER_ADDR -x
// MASTER_PORT). Rank 0 serves the store on MASTER_PORT; every rank connects to
// MASTER_ADDR. Nothing else is needed to run across nodes.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/host_tensor.h"

namespace loom::exec {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// This process's place, from the launcher's environment; nullopt when no
// launcher set one (a single process). Malformed values are errors naming the
// variable.
absl::StatusOr<std::optional<LaunchEnv>> LaunchEnvFromEnvironment();

// A blocking key-value store over TCP: rank 0 serves it, every rank (rank 0
// included) is a client. Values are bytes. Get waits until some rank has Set the
// key, at most `timeout_s`; a rank that never comes is reported, not waited for.
// After a failed request the connection is dropped (every later request fails).
// Rank 0's store serves until every other rank has disconnected (at most
// `timeout_s` after it is destroyed).
class TcpStore {
 public:
  // Rank 0 listens on `env.master_port`; every rank connects to
  // `env.master_addr`, retrying until `timeout_s`.
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(const LaunchEnv& env,
                                                           double timeout_s);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key);
  absl::Status Delete(const std::string& key);

  const LaunchEnv& env() const { return env_; }

 private:
  class Server;
  TcpStore(LaunchEnv env, double timeout_s);
  absl::Status Request(char op, const std::string& key, const std::string& value,
                       std::string* reply);

  LaunchEnv env_;
  double timeout_s_;
  std::unique_ptr<Server> server_;
  int socket_ = -1;
};

// A tensor as bytes for the store (dtype, dims, the values as doubles), and back.
std::string EncodeTensor(const ir::HostTensor& t);
absl::StatusOr<ir::HostTensor> DecodeTensor(const std::string& bytes);

}  // namespace loom::exec

#endif  // LOOM_EXEC_LAUNCH_H_
