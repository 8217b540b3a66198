#include "exec/launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::exec {
namespace {

using Clock = std::chrono::steady_clock;

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return std::nullopt;
  return std::string(v);
}

absl::StatusOr<int> EnvInt(const char* name, int min) {
  const std::optional<std::string> v = Env(name);
  int n = 0;
  if (!v.has_value() || !absl::SimpleAtoi(*v, &n) || n < min) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='",
                                                   v.value_or(""), "': expected an integer >= ",
                                                   min));
  }
  return n;
}

// Whole reads and writes on a socket; false when it closes or fails.
bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A message: one byte, then length-prefixed key and value.
bool WriteMessage(int fd, char op, const std::string& key, const std::string& value) {
  const uint64_t k = key.size(), v = value.size();
  return WriteAll(fd, &op, 1) && WriteAll(fd, &k, 8) && WriteAll(fd, key.data(), k) &&
         WriteAll(fd, &v, 8) && WriteAll(fd, value.data(), v);
}

bool ReadMessage(int fd, char& op, std::string& key, std::string& value) {
  uint64_t k = 0, v = 0;
  if (!ReadAll(fd, &op, 1) || !ReadAll(fd, &k, 8)) return false;
  key.resize(k);
  if (!ReadAll(fd, key.data(), k) || !ReadAll(fd, &v, 8)) return false;
  value.resize(v);
  return ReadAll(fd, value.data(), v);
}

}  // namespace

absl::StatusOr<std::optional<LaunchEnv>> LaunchEnvFromEnvironment() {
  const bool torchrun = Env("RANK").has_value() && Env("WORLD_SIZE").has_value();
  const bool mpi = Env("OMPI_COMM_WORLD_RANK").has_value();
  if (!torchrun && !mpi) return std::optional<LaunchEnv>();
  LaunchEnv env;
  const char* rank = torchrun ? "RANK" : "OMPI_COMM_WORLD_RANK";
  const char* size = torchrun ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE";
  const char* local = torchrun ? "LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK";
  absl::StatusOr<int> r = EnvInt(rank, 0), s = EnvInt(size, 1);
  if (!r.ok()) return r.status();
  if (!s.ok()) return s.status();
  env.rank = *r;
  env.world_size = *s;
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(rank, "=", env.rank, " is not below ", size, "=", env.world_size));
  }
  if (Env(local).has_value()) {
    absl::StatusOr<int> l = EnvInt(local, 0);
    if (!l.ok()) return l.status();
    env.local_rank = *l;
  } else {
    env.local_rank = env.rank;
  }
  if (std::optional<std::string> addr = Env("MASTER_ADDR")) env.master_addr = *addr;
  if (Env("MASTER_PORT").has_value()) {
    absl::StatusOr<int> p = EnvInt("MASTER_PORT", 1);
    if (!p.ok()) return p.status();
    env.master_port = *p;
  }
  return std::optional<LaunchEnv>(env);
}

// Rank 0's side: accepts every rank and answers its requests.
class TcpStore::Server {
 public:
  absl::Status Listen(int port) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
    int one = 1;
    ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_, 128) != 0) {
      return absl::UnavailableError(
          absl::StrCat("the store cannot listen on port ", port, ": ", std::strerror(errno)));
    }
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  // Waits until every client has closed its connection, at most `timeout_s`.
  void Drain(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return active_ == 0; });
  }

  ~Server() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (accept_thread_.joinable()) accept_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : handlers_) t.join();
    for (int fd : clients_) ::close(fd);
    if (listen_ >= 0) ::close(listen_);
  }

 private:
  void AcceptLoop() {
    while (!stopping_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int fd = ::accept(listen_, nullptr, nullptr);
      if (fd < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      clients_.push_back(fd);
      ++active_;
      handlers_.emplace_back([this, fd] {
        Serve(fd);
        std::lock_guard<std::mutex> done(mu_);
        --active_;
        cv_.notify_all();
      });
    }
  }

  void Serve(int fd) {
    char op = 0;
    std::string key, value;
    while (!stopping_ && ReadMessage(fd, op, key, value)) {
      std::unique_lock<std::mutex> lock(mu_);
      if (op == 'S' || op == 'D') {
        if (op == 'S') {
          data_[key] = value;
        } else {
          data_.erase(key);
        }
        cv_.notify_all();
        lock.unlock();
        if (!WriteMessage(fd, 'K', key, "")) return;
      } else {
        cv_.wait(lock, [&] { return stopping_ || data_.contains(key); });
        if (stopping_) return;
        const std::string found = data_[key];
        lock.unlock();
        if (!WriteMessage(fd, 'V', key, found)) return;
      }
    }
  }

  int listen_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
  std::vector<int> clients_;
  int active_ = 0;  // connections still open
  std::vector<std::thread> handlers_;
  std::thread accept_thread_;
};

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const LaunchEnv& env,
                                                            double timeout_s) {
  std::unique_ptr<TcpStore> store(new TcpStore(env, timeout_s));
  if (env.rank == 0) {
    store->server_ = std::make_unique<Server>();
    if (absl::Status s = store->server_->Listen(env.master_port); !s.ok()) return s;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(env.master_port);
  if (::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_ADDR '", env.master_addr, "' does not resolve"));
  }
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  int fd = -1;
  while (true) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) break;
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", env.rank, " could not reach the store at ",
                                                    env.master_addr, ":", env.master_port,
                                                    " within ", timeout_s, " s"));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  store->socket_ = fd;
  return store;
}

TcpStore::TcpStore(LaunchEnv env, double timeout_s)
    : env_(std::move(env)), timeout_s_(timeout_s) {}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
  // Rank 0 serves until the other ranks are done with the store.
  if (server_ != nullptr) server_->Drain(timeout_s_);
  server_.reset();
}

absl::Status TcpStore::Request(char op, const std::string& key, const std::string& value,
                               std::string* reply) {
  if (socket_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", env_.rank, ": the store connection was lost earlier"));
  }
  char got = 0;
  std::string k, v;
  if (!WriteMessage(socket_, op, key, value) || !ReadMessage(socket_, got, k, v) || k != key) {
    // A late answer would be read as the next request's: drop the connection.
    ::close(socket_);
    socket_ = -1;
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", env_.rank, " of ", env_.world_size, ": no answer from the store for '", key,
        "' within ", timeout_s_, " s (a rank that never started, or stopped?)"));
  }
  if (reply != nullptr) *reply = std::move(v);
  return absl::OkStatus();
}

absl::Status TcpStore::Set(const std::string& key, const std::string& value) {
  return Request('S', key, value, nullptr);
}

absl::Status TcpStore::Delete(const std::string& key) { return Request('D', key, "", nullptr); }

absl::StatusOr<std::string> TcpStore::Get(const std::string& key) {
  std::string value;
  if (absl::Status s = Request('G', key, "", &value); !s.ok()) return s;
  return value;
}

std::string EncodeTensor(const ir::HostTensor& t) {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const int32_t dtype = static_cast<int32_t>(t.dtype);
  const int32_t rank = t.shape.rank();
  put(&dtype, 4);
  put(&rank, 4);
  for (int64_t d : t.shape.dims()) put(&d, 8);
  put(t.data.data(), t.data.size() * sizeof(double));
  return out;
}

absl::StatusOr<ir::HostTensor> DecodeTensor(const std::string& bytes) {
  size_t at = 0;
  auto get = [&](void* p, size_t n) {
    if (at + n > bytes.size()) return false;
    std::memcpy(p, bytes.data() + at, n);
    at += n;
    return true;
  };
  int32_t dtype = 0, rank = 0;
  if (!get(&dtype, 4) || !get(&rank, 4) || rank < 0 || rank > 64) {
    return absl::DataLossError("a tensor from the store is truncated");
  }
  std::vector<int64_t> dims(rank);
  for (int64_t& d : dims) {
    if (!get(&d, 8) || d < 0) return absl::DataLossError("a tensor from the store is truncated");
  }
  ir::HostTensor t(ir::Shape(dims), static_cast<ir::DType>(dtype));
  if (bytes.size() - at != t.data.size() * sizeof(double)) {
    return absl::DataLossError("a tensor from the store has the wrong size");
  }
  get(t.data.data(), t.data.size() * sizeof(double));
  return t;
}

}  // namespace loom::exec
