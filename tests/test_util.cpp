#include "test_util.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <torch/cuda.h>

#include "checkpoint/hf_folder.h"
#include "config/recipe.h"
#include "model/hf_mapping.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "model/gpt_shapes.h"
#include "optim/make_optimizer.h"
#include "optim/muon.h"
#include "util/error.h"

namespace gputrain::test {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gputrain_test_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

int spawn(std::string bin, const std::vector<std::string>& args, int out_fd) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv{bin.data()};
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

CommandResult run_program(const std::string& bin, const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const int pid = spawn(bin, args, fds[1]);  // dup2 clears CLOEXEC on the child's stdout/stderr
  close(fds[1]);
  CommandResult r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  r.exit_code = wait_exit_code(pid);
  return r;
}

}  // namespace

int spawn_gputrain(const std::vector<std::string>& args, int out_fd) { return spawn(GPUTRAIN_BINARY, args, out_fd); }

int spawn_program(const std::string& bin, const std::vector<std::string>& args, int out_fd) {
  return spawn(bin, args, out_fd);
}

int wait_exit_code(int pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

KillOnExit::~KillOnExit() {
  for (int pid : pids_)
    if (pid > 0) ::kill(pid, SIGKILL);  // an ended one's pid comes round again only after pid_max others
}

ScopedEnv::ScopedEnv(const std::string& name, const std::string& value) : name_(name) {
  ::setenv(name.c_str(), value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() { ::unsetenv(name_.c_str()); }

ArmedFailpoints::ArmedFailpoints(const std::string& spec) {
  ::setenv("GPUTRAIN_FAILPOINTS", spec.c_str(), 1);
  ::setenv("GPUTRAIN_FAILPOINT_DIR", dir_.path().c_str(), 1);
  // "a@2=pause;b=after:c@3": a, b and c.
  std::stringstream items(spec);
  for (std::string item; std::getline(items, item, ';');) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    names_.push_back(item.substr(0, std::min(eq, item.find('@'))));
    const std::string action = item.substr(eq + 1);
    if (action.rfind("after:", 0) == 0) names_.push_back(action.substr(6, action.find('@') - 6));
  }
}

ArmedFailpoints::~ArmedFailpoints() {
  ::unsetenv("GPUTRAIN_FAILPOINTS");
  ::unsetenv("GPUTRAIN_FAILPOINT_DIR");
  if (std::uncaught_exceptions() > 0) return;  // the test failed already
  for (const std::string& name : names_) {
    INFO("failpoint '" << name << "' was armed but fired in no process: renamed, removed or never reached?");
    CHECK(fired(name) > 0);
  }
}

size_t ArmedFailpoints::fired(const std::string& name) const { return marked(name, ".fired").size(); }

std::vector<int> ArmedFailpoints::marked(const std::string& name, const std::string& suffix) const {
  const std::string prefix = name + ".";
  std::vector<int> pids;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    const std::string f = e.path().filename().string();
    if (f.size() > prefix.size() + suffix.size() && f.rfind(prefix, 0) == 0 &&
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0)
      pids.push_back(std::stoi(f.substr(prefix.size(), f.size() - prefix.size() - suffix.size())));
  }
  return pids;
}

std::vector<int> ArmedFailpoints::wait_paused(const std::string& name, int still_running, size_t count) {
  std::vector<int> pids;
  auto paused = [&] {
    pids = marked(name, ".reached");
    if (pids.size() >= count) return true;
    siginfo_t info{};  // ended (left unreaped for the test's own wait): stop waiting
    return ::waitid(P_PID, static_cast<id_t>(still_running), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
           info.si_pid != 0;
  };
  if (!wait_until(paused) || pids.size() < count) return {};
  return pids;
}

void ArmedFailpoints::release(const std::string& name) const { write_file(dir_.file(name + ".release"), ""); }

double proc_status_mb(const std::string& pid, const std::string& field) {
  std::ifstream status("/proc/" + pid + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;  // kB
  throw std::runtime_error("/proc/" + pid + "/status has no " + field);
}

double rel_error(const torch::Tensor& got, const torch::Tensor& ref) {
  return (got.cpu().to(torch::kDouble) - ref).norm().item<double>() / std::max(ref.norm().item<double>(), 1e-30);
}

void mark_skipped(const std::string& reason) {
  WARN("skipped: " << reason);
  std::cout << kSkippedMarker << ": " << reason << std::endl;
}

CommandResult run_gputrain(const std::vector<std::string>& args) { return run_program(GPUTRAIN_BINARY, args); }

namespace {

// tests/reference/fork_server.py, the one a ctest run shares or else one started on this process's first
// run_python (each ctest case is a process of its own): every reference it runs is a fork that has torch
// and transformers imported.
class PythonForks {
 public:
  ~PythonForks() {
    if (socket_ >= 0) close(socket_);  // EOF: the server ends
  }
  // The call's result; nullopt where the server did not start or has gone (the caller runs it alone).
  std::optional<CommandResult> run(const std::vector<std::string>& args) {
    if (socket_ < 0 && (failed_ || !start())) return std::nullopt;
    char output[] = "/tmp/gputrain_python_XXXXXX";
    const int fd = mkstemp(output);
    if (fd < 0) return std::nullopt;
    close(fd);
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string item(*e);
      const size_t eq = item.find('=');
      if (eq != std::string::npos) env[item.substr(0, eq)] = item.substr(eq + 1);
    }
    const std::string request =
        nlohmann::json(
            {{"argv", args}, {"cwd", std::filesystem::current_path().string()}, {"env", env}, {"output", output}})
            .dump() +
        "\n";
    std::optional<CommandResult> result;
    if (send_all(request)) {
      if (const std::optional<std::string> reply = receive_line()) {
        result = CommandResult{nlohmann::json::parse(*reply)["exit_code"].get<int>(), read_file(output)};
      }
    }
    if (!result) stop();
    std::remove(output);
    return result;
  }

 private:
  bool start() {
    if (connect_shared()) return true;
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return failed_ = true, false;
    std::string python = GPUTRAIN_PYTHON, script = std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/fork_server.py";
    char* argv[] = {python.data(), script.data(), nullptr};
    const pid_t pid = fork();
    if (pid < 0) return close(pair[0]), close(pair[1]), failed_ = true, false;
    if (pid == 0) {
      dup2(pair[1], STDIN_FILENO);  // dup2 clears CLOEXEC on the copies
      dup2(pair[1], STDOUT_FILENO);
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDERR_FILENO);
      execv(python.c_str(), argv);
      _exit(127);
    }
    close(pair[1]);
    socket_ = pair[0];
    return true;
  }
  // The server a whole ctest run shares (its fixture python_forks sets GPUTRAIN_PYTHON_FORKS), if it listens.
  bool connect_shared() {
    const char* path = std::getenv("GPUTRAIN_PYTHON_FORKS");
    sockaddr_un address{};
    if (!path || std::strlen(path) >= sizeof address.sun_path) return false;
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, path);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return close(fd), false;
    socket_ = fd;
    return true;
  }
  void stop() {
    if (socket_ >= 0) close(socket_);
    socket_ = -1;
    failed_ = true;
  }
  bool send_all(const std::string& text) {
    for (size_t sent = 0; sent < text.size();) {
      const ssize_t n = ::send(socket_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  std::optional<std::string> receive_line() {
    std::string line;
    char c;
    while (::recv(socket_, &c, 1, 0) == 1) {
      if (c == '\n') return line;
      line.push_back(c);
    }
    return std::nullopt;  // the server is gone (it could not import, or was killed)
  }
  int socket_ = -1;
  bool failed_ = false;
};

}  // namespace

CommandResult run_python(const std::vector<std::string>& args) {
  static PythonForks forks;
  const bool script = !args.empty() && (args[0] == "-c" || !args[0].starts_with("-"));  // not -m, -u, ...
  if (std::optional<CommandResult> r = script ? forks.run(args) : std::nullopt) return *r;
  return run_program(GPUTRAIN_PYTHON, args);
}

CommandResult run_quickstart_briefly(const std::string& out) {
  return run_gputrain({"run", "--output-dir", out, "--set", "train.max_steps=2", "--set", "train.eval_every=0", "--set",
                       "optim.schedule.warmup_steps=0", "--set", "metrics.progress=off"});
}

std::string shell_quoted(const std::string& text) {
  std::string out("'");
  for (char c : text) c == '\'' ? out.append("'\\''") : out.append(1, c);
  return out.append("'");
}

CommandResult run_shell(const std::string& command) {
  return run_program("/bin/bash", {"-c", std::string("GPUTRAIN='") + GPUTRAIN_BINARY + "'; " + command});
}

std::string shared_data(const std::string& name) { return std::string(GPUTRAIN_SHARED_DATA_DIR) + "/" + name; }

std::string tiny_shakespeare_model_and_data() {
  const std::string text = shared_data("tinyshakespeare.txt");
  return "model: {vocab_size: 256, seq_len: 64, n_layer: 2, n_head: 4, d_model: 64}\n"
         "data:\n"
         "  train: {format: text, path: " +
         text + ", span: [0.0, 0.9]}\n  eval: {format: text, path: " + text + ", span: [0.9, 1.0]}\n";
}

std::string precision_reference_recipe() {
  return "run: {name: prec, threads: 2}\n" + tiny_shakespeare_model_and_data() +
         "train: {per_device_batch_size: 8, max_steps: 80, log_every: 20, eval_steps: 8}\n"
         // A stable setting: at lr 3e-3 this model has loss spikes (to ~10 nats, in fp32 too) whose step and
         // size depend on rounding, which turns a per-step comparison of precisions into a coin toss.
         "optim: {lr: 2e-3, schedule: {warmup_steps: 20}}\n"
         "metrics: {progress: off}\n";
}

void check_precisions_track_fp32(const std::map<std::string, std::vector<nlohmann::json>>& lines) {
  REQUIRE(lines.count("fp32"));
  const std::vector<nlohmann::json>& fp32 = lines.at("fp32");
  REQUIRE(!fp32.empty());
  for (const auto& [mode, rows] : lines) {
    if (mode == "fp32") continue;
    // bf16-pure (bf16 weights, stochastic rounding) lags fp32 early by an amount that depends on the
    // initial draws: 0.02-0.33 over 4 seeds with the counter-based initialization. On the CPU test's seed
    // (2026-12-01): at most 0.020 per log step, the eval loss 0.018 above; bf16 0.012 and 0.012, fp16
    // 0.0036 and 0.0050. With the CPU cross-entropy in row chunks (the same loss and gradient to fp32
    // rounding, 2026-12-02) bf16-pure's early lag on that seed became 0.232 (its eval loss 0.00007 off),
    // bf16's 0.021: bf16-pure is held to the seeds' spread (0.35) and 0.08 at the end; the others to
    // docs/training.md's 0.05 and 0.03.
    const double tolerance = mode == "bf16-pure" ? 0.35 : 0.05;
    REQUIRE(rows.size() == fp32.size());
    double largest = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO(mode << " at step " << rows[i]["step"]);
      const double d = std::fabs(rows[i]["loss_avg"].get<double>() - fp32[i]["loss_avg"].get<double>());
      largest = std::max(largest, d);
      CHECK(d < tolerance);
    }
    INFO(mode << " eval");
    REQUIRE(rows.back().contains("eval_loss"));
    const double gap = rows.back()["eval_loss"].get<double>() - fp32.back()["eval_loss"].get<double>();
    std::cout << mode << " against fp32: largest loss_avg difference " << largest << ", final eval loss " << gap
              << std::endl;
    if (mode == "bf16-pure") CHECK(gap < 0.08);
    else CHECK(std::fabs(gap) < 0.03);
  }
}

ModelSettings model_settings(int64_t vocab_size, int64_t seq_len, int64_t n_layer, int64_t n_head, int64_t d_model) {
  ModelSettings m;
  m.vocab_size = vocab_size;
  m.seq_len = seq_len;
  m.n_layer = n_layer;
  m.n_head = n_head;
  m.d_model = d_model;
  return m;
}

void write_hf_folder(const std::vector<NamedTensor>& weights, const ModelSettings& m, torch::ScalarType dtype,
                     const std::filesystem::path& dir, uint64_t shard_bytes) {
  std::filesystem::create_directories(dir);
  write_file((dir / "config.json").string(), architecture(m).hf.config(m).dump(2));
  write_hf_weights(dir, to_hf_tensors(weights, m, dtype), shard_bytes);
}

std::string shape_list_mismatch(const ModelSettings& m, const torch::nn::Module& model) {
  const auto shapes = gpt_parameter_shapes(m);
  const auto named = model.named_parameters();
  if (shapes.size() != named.size())
    return std::to_string(shapes.size()) + " shapes listed, " + std::to_string(named.size()) + " parameters";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& p = named[i];
    if (shapes[i].name != p.key() || shapes[i].sizes != p.value().sizes().vec() ||
        shapes[i].trainable != p.value().requires_grad())
      return "entry " + std::to_string(i) + ": listed " + shapes[i].name + ", the model has " + p.key();
  }
  return "";
}

std::vector<torch::Tensor> gradients_of(const torch::nn::Module& model) {
  std::vector<torch::Tensor> g;
  for (const auto& p : model.parameters()) g.push_back(p.grad().clone());
  return g;
}

std::string error_message(ErrorKind kind, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  return "";
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string recipe_error(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    load_recipe(path, overrides, recipe_rules());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

nlohmann::json eval_json(const TempDir& dir, const std::string& args) {
  const CommandResult r = run_shell("\"$GPUTRAIN\" eval " + args + " > '" + dir.file("eval.out") + "'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(read_file(dir.file("eval.out")));
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

namespace {

std::string bf16_working_set_mismatch_of(const OptimSettings& o, const torch::Device& device) {
  // Sets of up to 2^20 elements on the CPU, up to the largest tensor (1.1M) on a GPU: both make
  // several sets here, one of them of two tensors.
  const std::vector<std::vector<int64_t>> shapes = {{7}, {1100, 1000}, {600, 1000}, {3, 5}, {600, 1000}, {9, 4}, {11}};
  const size_t no_grad = 3, fp32 = 5;
  at::manual_seed(3);
  std::vector<at::Tensor> ours, ref;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ours.push_back(at::randn(shapes[i]).to(i == fp32 ? at::kFloat : at::kBFloat16).to(device));
    ref.push_back(ours.back().to(at::kFloat));
  }
  auto group = [&](const std::vector<at::Tensor>& params) {
    ParamGroup g{"decay", {}, params, 0.1, 1.0};
    for (size_t i = 0; i < params.size(); ++i) g.names.push_back(std::string("p").append(std::to_string(i)));
    return std::vector<ParamGroup>{g};
  };
  auto opt = make_optimizer(group(ours), o), ref_opt = make_optimizer(group(ref), o);
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      ref[i].copy_(ours[i]);  // the reference continues from our rounded values
      if (i == no_grad) continue;
      ours[i].mutable_grad() = at::randn(shapes[i]).to(ours[i].scalar_type()).to(device);
      ref[i].mutable_grad() = ours[i].grad().to(at::kFloat);
    }
    const at::Tensor untouched = ours[no_grad].clone();
    opt->step(1e-2);
    ref_opt->step(1e-2);
    const std::string where = opt->describe() + ", step " + std::to_string(step) + ": ";
    if (!at::equal(ours[no_grad], untouched)) return where + "the parameter without a gradient changed";
    if (!at::equal(ours[fp32], ref[fp32])) return where + "the fp32 parameter differs from the reference";
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (i == no_grad || i == fp32) continue;
      const at::Tensor r = ref[i].view(at::kInt), b = ours[i].to(at::kFloat).view(at::kInt);
      const at::Tensor down = at::bitwise_and(r, int64_t{-65536});  // the low 16 bits dropped
      const std::string tensor = where + "tensor " + std::to_string(i) + ": ";
      if (!at::logical_or(b == down, b == down + 65536).all().item<bool>())
        return tensor + "a value is neither its fp32 update truncated nor one bf16 step above";
      if (ours[i].numel() > 1000 && !at::logical_and(b != down, b == down + 65536).any().item<bool>())
        return tensor + "no value was rounded up";
      if (ours[i].numel() > 1000 && !at::logical_and(b == down, r != down).any().item<bool>())
        return tensor + "no inexact value was rounded down";
    }
    opt->zero_grad();
    ref_opt->zero_grad();
  }
  return "";
}

}  // namespace

std::string bf16_working_set_mismatch(const torch::Device& device) {
  for (OptimName name : {OptimName::kAdamW, OptimName::kAdafactor, OptimName::kLion, OptimName::kSgd}) {
    OptimSettings o;
    o.name = name;
    o.impl = OptimImpl::kForeach;
    o.adafactor.beta1 = 0.9;  // every state slot in use
    o.sgd.momentum = 0.9;
    const std::string mismatch = bf16_working_set_mismatch_of(o, device);
    if (!mismatch.empty()) return mismatch;
  }
  return "";
}

MatrixGroup logged_group(std::vector<std::string>& events) {
  auto started = std::make_shared<int>(0);
  MatrixGroup g;
  g.start_exchange = [&events, started](const std::vector<torch::Tensor>& sends,
                                        const std::vector<int64_t>&) -> MatrixGroup::Arrival {
    const std::string n = std::to_string((*started)++);
    events.push_back("start " + n);
    return [&events, n, sends] {
      events.push_back("arrive " + n);
      return sends;
    };
  };
  return g;
}

MatrixShards whole_on_one_rank(std::vector<int64_t> sizes) {
  return MatrixShards{0, std::move(sizes), [](const std::vector<torch::Tensor>& shards) { return shards.front(); },
                      [](const torch::Tensor& whole, int) { return whole; }};
}

std::string muon_pipelined_mismatch(const torch::Device& device) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::string what = std::string(dtype == at::kFloat ? "fp32" : "bf16") + " parameters: ";
    const std::vector<std::vector<int64_t>> shapes = {{16, 32}, {32, 16}, {16, 32}, {48, 16}, {16, 16}, {32, 16}};
    auto make_group = [&] {
      torch::manual_seed(5);
      ParamGroup g;
      g.weight_decay = 0.1;
      for (size_t i = 0; i < shapes.size(); ++i) {
        g.names.push_back("transformer.h." + std::to_string(i) + ".mlp.c_fc.weight");
        g.params.push_back(torch::randn(shapes[i]).to(dtype).to(device).set_requires_grad(true));
      }
      return g;
    };
    OptimSettings o;
    o.name = OptimName::kMuon;
    o.muon.ns_dtype = MuonIterationDtype::kFp32;
    Muon whole({make_group()}, o, UpdateKernel::kForeach);
    Muon sharded({make_group()}, o, UpdateKernel::kForeach, /*sharded_set_elements=*/600);
    std::vector<std::string> events;
    MatrixSharding sharding;
    sharding.groups.push_back(logged_group(events));
    for (size_t i : {0, 1, 3, 5}) sharding.params[sharded.groups()[0].names[i]] = whole_on_one_rank(shapes[i]);
    sharded.set_matrix_sharding(sharding);
    for (int step = 0; step < 3; ++step)
      for (Muon* m : {&whole, &sharded}) {
        torch::manual_seed(100 + step);
        for (size_t i = 0; i < shapes.size(); ++i)
          m->groups()[0].params[i].mutable_grad() = torch::randn(shapes[i]).to(dtype).to(device);
        torch::manual_seed(7 + step);  // the same stochastic rounding of bf16 parameters
        if (device.is_cuda()) torch::cuda::manual_seed_all(7 + step);
        m->step(0.02);
      }
    for (size_t i = 0; i < shapes.size(); ++i) {
      const double diff =
          (whole.groups()[0].params[i] - sharded.groups()[0].params[i]).abs().max().to(at::kDouble).item<double>();
      if (!(diff < (dtype == at::kFloat ? 1e-6 : 1e-2)))
        return what + "matrix " + std::to_string(i) + " is " + std::to_string(diff) + " apart";
    }
    // Sets of one matrix each (600 elements at most): the four sharded ones' sets exchange twice a step.
    const auto starts =
        std::count_if(events.begin(), events.end(), [](const std::string& e) { return e.starts_with("start"); });
    if (starts != 3 * 4 * 2) return what + std::to_string(starts) + " exchanges, not 24";
  }
  return "";
}

namespace {

std::string base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += k[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += k[(v >> 18) & 63], out += k[(v >> 12) & 63], out += k[(v >> 6) & 63], out += '=';
  }
  return out;
}

}  // namespace

std::string reference_tokenizer(const std::string& name) {
  static const std::string dir = [] {
    // Named by the script's contents, so that a changed script is run again rather than its old output read.
    const std::string script = std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/make_tokenizers.py";
    const std::string final_dir = std::string(GPUTRAIN_TEST_CACHE_DIR) + "/reference_tokenizers-" +
                                  std::to_string(std::hash<std::string>{}(read_file(script)));
    if (std::filesystem::exists(final_dir + "/done")) return final_dir;
    const std::string tmp = final_dir + ".tmp" + std::to_string(::getpid());
    CommandResult r = run_python({script, std::string(GPUTRAIN_SHARED_DATA_DIR), tmp});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    write_file(tmp + "/done", "");
    std::error_code ec;
    std::filesystem::rename(tmp, final_dir, ec);  // another test process may have won the race: use its copy
    if (ec) std::filesystem::remove_all(tmp);
    return final_dir;
  }();
  return dir + "/" + name;
}

std::vector<std::vector<uint32_t>> reference_token_ids(const std::string& tokenizer_file,
                                                       const std::vector<std::string>& texts) {
  TempDir dir;
  nlohmann::json encoded = nlohmann::json::array();
  for (const auto& t : texts) encoded.push_back(base64(t));
  write_file(dir.file("in.json"), encoded.dump());
  CommandResult r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/tokenize_reference.py",
                                tokenizer_file, dir.file("in.json"), dir.file("out.json")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_json(dir.file("out.json")).get<std::vector<std::vector<uint32_t>>>();
}

std::vector<std::string> reference_decode(const std::string& tokenizer_file,
                                          const std::vector<std::vector<uint32_t>>& ids) {
  TempDir dir;
  write_file(dir.file("in.json"), nlohmann::json(ids).dump());
  CommandResult r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/tokenize_reference.py", "--decode",
                                tokenizer_file, dir.file("in.json"), dir.file("out.json")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_json(dir.file("out.json")).get<std::vector<std::string>>();
}

CommandResult run_traced(const std::string& trace, const std::vector<std::string>& args, const std::string& env) {
  std::string command = env + " GPUTRAIN_TRACE_BATCHES=" + shell_quoted(trace) + " \"$GPUTRAIN\"";
  for (const auto& a : args) command.append(" ").append(shell_quoted(a));
  return run_shell(command);
}

std::vector<nlohmann::json> traced_batches(const std::string& trace, int ranks) {
  std::vector<nlohmann::json> lines;
  for (int r = 0; r < ranks; ++r)
    for (auto& l : read_jsonl(trace + "/rank" + std::to_string(r) + ".jsonl")) lines.push_back(std::move(l));
  return lines;
}

CommandResult run_recipe(const std::string& recipe, const std::string& out, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"run", recipe, "--output-dir", out};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return run_gputrain(args);
}

std::vector<nlohmann::json> step_records(const std::string& out) {
  std::vector<nlohmann::json> lines = read_jsonl(out + "/metrics.jsonl");
  for (auto& l : lines)
    for (const char* k : {"tokens_per_s", "step_ms", "mem_peak_mb"}) l.erase(k);
  return lines;
}

std::string exit2_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(exit_code_for(e.kind()) == 2);
    return e.what();
  }
  return "no error";
}

std::vector<uint32_t> read_shard_ids(const std::string& path, int width) {
  const std::string bytes = read_file(path);
  std::vector<uint32_t> ids;
  for (size_t i = 1024; i + width <= bytes.size(); i += width) {
    uint32_t v = 0;
    for (int k = width - 1; k >= 0; --k) v = v << 8 | static_cast<uint8_t>(bytes[i + k]);
    ids.push_back(v);
  }
  return ids;
}

}  // namespace gputrain::test
