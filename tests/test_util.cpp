#include "test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "config/recipe.h"
#include "model/gpt_shapes.h"
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

int wait_exit_code(int pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

CommandResult run_gputrain(const std::vector<std::string>& args) { return run_program(GPUTRAIN_BINARY, args); }

CommandResult run_python(const std::vector<std::string>& args) { return run_program(GPUTRAIN_PYTHON, args); }

std::string shared_data(const std::string& name) { return std::string(GPUTRAIN_SHARED_DATA_DIR) + "/" + name; }

ModelSettings model_settings(int64_t vocab_size, int64_t seq_len, int64_t n_layer, int64_t n_head, int64_t d_model) {
  ModelSettings m;
  m.vocab_size = vocab_size;
  m.seq_len = seq_len;
  m.n_layer = n_layer;
  m.n_head = n_head;
  m.d_model = d_model;
  return m;
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

std::string recipe_error(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    load_recipe(path, overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace gputrain::test
