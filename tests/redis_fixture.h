// A private redis-server for a test: started on 127.0.0.1 on a free port, in
// its own temporary directory, with persistence off; stopped (and the
// directory removed) by the destructor. Tests skip with a clear message only
// when the redis-server binary is missing.
#ifndef GEARBOX_TESTS_REDIS_FIXTURE_H_
#define GEARBOX_TESTS_REDIS_FIXTURE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace gearbox::testing {

// The redis-server binary: $GEARBOX_REDIS_SERVER, else the first on PATH,
// else /usr/bin/redis-server; empty when none is executable.
inline std::string FindRedisServer() {
  if (const char* env = std::getenv("GEARBOX_REDIS_SERVER")) {
    if (access(env, X_OK) == 0) return env;
  }
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      const size_t end = p.find(':', start);
      dirs.push_back(p.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  dirs.push_back("/usr/bin");
  dirs.push_back("/usr/sbin");
  for (const std::string& d : dirs) {
    const std::string candidate = d + "/redis-server";
    if (!d.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A TCP port on 127.0.0.1 nobody listens on right now (the kernel's choice).
inline int FreeLocalPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

inline bool CanConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

class RedisServer {
 public:
  // `extra`: more redis-server arguments (e.g. {"--requirepass", "secret"}).
  explicit RedisServer(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
    binary_ = FindRedisServer();
    if (binary_.empty()) return;
    char tmpl[] = "/tmp/gearbox-redis-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    port_ = FreeLocalPort();
    Start();
  }
  ~RedisServer() {
    Stop();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool available() const { return !binary_.empty(); }
  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string error() const { return error_; }

  // Starts it (again, on the same port and directory); waits until it accepts connections.
  bool Start() {
    if (binary_.empty() || pid_ > 0 || port_ == 0) return false;
    std::vector<std::string> args = {binary_,  "--port",       std::to_string(port_),
                                     "--bind", "127.0.0.1",    "--save",
                                     "",       "--appendonly", "no",
                                     "--dir",  dir_,           "--daemonize",
                                     "no",     "--logfile",    dir_ + "/redis.log"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    if (pid < 0) {
      error_ = "fork failed";
      return false;
    }
    pid_ = pid;
    // Readiness, not a timing assertion: give up after ~10 s of polling.
    for (int i = 0; i < 1000; ++i) {
      if (CanConnect(port_)) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        error_ = "redis-server exited at start (see its log in " + dir_ + ")";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    error_ = "redis-server did not accept connections";
    Stop();
    return false;
  }
  // Kills it (SIGKILL: as a crash would) and reaps it.
  void Kill() { Signal(SIGKILL); }
  // Stops it (SIGTERM) and reaps it.
  void Stop() { Signal(SIGTERM); }

 private:
  void Signal(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }

  std::vector<std::string> extra_;
  std::string binary_;
  std::string dir_;
  std::string error_;
  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace gearbox::testing

// Skips the test when there is no redis-server binary; fails when one is
// there but could not be started.
#define GEARBOX_REQUIRE_REDIS(server)                                                      \
  do {                                                                                     \
    if (!(server).available()) {                                                           \
      GTEST_SKIP() << "redis-server not found (PATH, /usr/bin, $GEARBOX_REDIS_SERVER): "   \
                      "install it (scripts/install-deps.sh) to run the Redis fleet tests"; \
    }                                                                                      \
    ASSERT_TRUE((server).running()) << (server).error();                                   \
  } while (0)

#endif  // GEARBOX_TESTS_REDIS_FIXTURE_H_
