// Helpers shared by the tests: temporary directories, files, running the CLI.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <string>
#include <thread>
#include <vector>

#include "config/settings.h"
#include "optim/optimizer.h"
#include "test_paths.h"
#include "util/named_tensor.h"
#include "util/error.h"

namespace gputrain::test {

// A fresh directory under /tmp, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs the gputrain binary with `args` (each passed as one argument).
CommandResult run_gputrain(const std::vector<std::string>& args);
// A short run of the built-in quickstart (synthetic token ids) into `out`.
CommandResult run_quickstart_briefly(const std::string& out);
// `text` in single quotes for a shell command (built by appending: g++ 12 warns, wrongly, on "'" + text).
std::string shell_quoted(const std::string& text);
// Runs `command` with bash -c, the gputrain binary's path in $GPUTRAIN (for pipes and redirections).
CommandResult run_shell(const std::string& command);
// Runs the Python that holds the reference libraries (torch, tokenizers):
// the build's virtual environment.
CommandResult run_python(const std::vector<std::string>& args);
// A file in ../shared/data (tinyshakespeare.txt, gpt2/encoder.json, ...).
std::string shared_data(const std::string& name);

// The tokenizer files tests/reference/make_tokenizers.py builds from real vocabularies (made once per
// build tree): reference_tokenizer("llama3") is that folder, "sentencepiece/..." a .model file.
std::string reference_tokenizer(const std::string& name);
// The reference library's ids (HF tokenizers for a tokenizer.json, sentencepiece for a .model) of each
// text, given as bytes (tests/reference/tokenize_reference.py).
std::vector<std::vector<uint32_t>> reference_token_ids(const std::string& tokenizer_file,
                                                       const std::vector<std::string>& texts);
// The reference library's decoding of each list of `ids` (special tokens kept), as UTF-8.
std::vector<std::string> reference_decode(const std::string& tokenizer_file,
                                          const std::vector<std::vector<uint32_t>>& ids);
// Starts the gputrain binary with its stdout and stderr on `out_fd`; returns its pid.
int spawn_gputrain(const std::vector<std::string>& args, int out_fd);
// The same for program `bin` (a path).
int spawn_program(const std::string& bin, const std::vector<std::string>& args, int out_fd);
// Waits for a spawned process; its exit code, or 128 + signal when killed.
int wait_exit_code(int pid);

// A memory field of /proc/<pid>/status ("self" for this process), e.g. VmRSS or VmHWM, in MiB: what the
// kernel counts, for memory measured from outside the code.
double proc_status_mb(const std::string& pid, const std::string& field);

// |got - ref| / |ref| (Frobenius norms), got on any device and in any dtype against a float64 reference.
double rel_error(const torch::Tensor& got, const torch::Tensor& ref);

// Ends nothing by itself: prints `reason` with the marker ctest's SKIP_REGULAR_EXPRESSION looks for
// (tests/CMakeLists.txt), so the case counts as skipped, not passed; the caller returns after it.
// (Debian's Catch2 2 has no SKIP.)
void mark_skipped(const std::string& reason);
inline constexpr const char* kSkippedMarker = "GPUTRAIN-TEST-SKIPPED";

nlohmann::json read_json(const std::string& path);
// `gputrain eval ARGS` (quoted by the caller), its JSON on stdout kept in dir/eval.out: REQUIREs
// success and returns it.
nlohmann::json eval_json(const TempDir& dir, const std::string& args);

// Processes a test started that must not outlive it: those still running are SIGKILLed when the
// guard dies, also when a failed REQUIRE ends the test early.
class KillOnExit {
 public:
  explicit KillOnExit(std::vector<int> pids = {}) : pids_(std::move(pids)) {}
  ~KillOnExit();
  KillOnExit(const KillOnExit&) = delete;
  KillOnExit& operator=(const KillOnExit&) = delete;
  void add(int pid) { pids_.push_back(pid); }

 private:
  std::vector<int> pids_;
};

// Sets the environment variable `name` to `value` in this process (and so in the runs it starts) while
// the object lives; unset again after.
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

// Failpoints (lib/util/failpoint.h) armed for the runs this test starts while the object lives:
// GPUTRAIN_FAILPOINTS = `spec` in this process's environment, which spawned runs inherit, and a
// directory of its own for the pause markers. Dying, it fails the test for each failpoint of `spec`
// (and each one an `after:` waited for) that fired in no process: a renamed or removed failpoint
// fails the tests that use it instead of letting them pass without the event they order.
class ArmedFailpoints {
 public:
  explicit ArmedFailpoints(const std::string& spec);
  ~ArmedFailpoints();
  // How many processes have acted at failpoint `name` so far (its .fired markers).
  size_t fired(const std::string& name) const;
  ArmedFailpoints(const ArmedFailpoints&) = delete;
  ArmedFailpoints& operator=(const ArmedFailpoints&) = delete;
  // Waits until `count` processes have paused at `name`; their pids, or none when `still_running` (a
  // process the test started: the run, or its launcher) ended first.
  std::vector<int> wait_paused(const std::string& name, int still_running, size_t count = 1);
  // Lets every process paused at `name` go on.
  void release(const std::string& name) const;

 private:
  // The pids of the markers <name>.<pid><suffix> the processes left (".reached", ".fired").
  std::vector<int> marked(const std::string& name, const std::string& suffix) const;
  TempDir dir_;
  std::vector<std::string> names_;
};

// Waits until `ready()` holds, polling every 2 ms. The ten minutes after which it gives up (false) only
// keep a broken run from hanging the suite: no result may depend on how soon ready() holds.
template <class F>
bool wait_until(F ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// The byte-level model (vocab 256, 2 layers, d_model 64) and data (tinyshakespeare.txt: the first
// 90% to train on, the rest to evaluate) that the real-text tests share, as recipe lines.
std::string tiny_shakespeare_model_and_data();

// Real text on which each precision mode is held to fp32 (docs/training.md "Precision"), on the CPU and on a GPU.
std::string precision_reference_recipe();

// docs/training.md "Precision": each mode of `lines` (metrics.jsonl per precision.mode, "fp32" the reference)
// stays within 0.05 nats of fp32's loss_avg at every log step and ends within 0.03 in eval loss;
// bf16-pure within 0.2 at every log step, and not ending more than 0.08 worse in eval loss (measured
// 0.020 and 0.018 on the CPU test's seed; what it lags by depends on the initial draws: test_util.cpp).
void check_precisions_track_fp32(const std::map<std::string, std::vector<nlohmann::json>>& lines);

// A GPT shape for tests; other model settings keep their defaults.
ModelSettings model_settings(int64_t vocab_size, int64_t seq_len, int64_t n_layer, int64_t n_head, int64_t d_model);

// `weights` (a plain model's module_weights) as a Hugging Face folder of `m`'s architecture in `dtype`:
// config.json and the weights in shards of about `shard_bytes` (export's layout).
void write_hf_folder(const std::vector<NamedTensor>& weights, const ModelSettings& m, torch::ScalarType dtype,
                     const std::filesystem::path& dir, uint64_t shard_bytes);

// "" when the shape list the plan uses (model/gpt_shapes.h) names `model`'s
// parameters in order, with their sizes and trainability; else the first difference.
std::string shape_list_mismatch(const ModelSettings& m, const torch::nn::Module& model);

// Copies of every parameter's .grad, in parameter order.
std::vector<torch::Tensor> gradients_of(const torch::nn::Module& model);

// The message of the gputrain::Error `f` throws, checked to be of `kind`; "" when it throws none.
std::string error_message(gputrain::ErrorKind kind, const std::function<void()>& f);

// The message of the Error that loading recipe `path` throws, or "" when it loads.
std::string recipe_error(const std::string& path, const std::vector<std::string>& overrides = {});
// Recipe overrides `a` followed by `b`.
std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b);
std::vector<nlohmann::json> read_jsonl(const std::string& path);

// `gputrain ARGS` with GPUTRAIN_TRACE_BATCHES=`trace` (train/batch_trace.h) and the variables of `env`
// ("NAME=value ...") set for it.
CommandResult run_traced(const std::string& trace, const std::vector<std::string>& args, const std::string& env = "");
// What the `ranks` processes of a traced run trained on, a line per micro-batch ({step, micro, input}):
// rank 0's in order, then rank 1's, ...
std::vector<nlohmann::json> traced_batches(const std::string& trace, int ranks = 1);

// `gputrain run RECIPE --output-dir OUT --set S ...`.
CommandResult run_recipe(const std::string& recipe, const std::string& out, const std::vector<std::string>& sets = {});
// A run's metrics.jsonl records without the timing fields (what a resumed or parallel run must repeat).
std::vector<nlohmann::json> step_records(const std::string& out);
// The message of the gputrain Error `f` throws, checked to be an exit-2 (bad input) error;
// "no error" when it throws none.
std::string exit2_error_of(const std::function<void()>& f);
// The ids of an llm.c shard, after its 1024-byte header, `width` (2 or 4) little-endian bytes each.
std::vector<uint32_t> read_shard_ids(const std::string& path, int width);

// Three steps of each foreach optimizer (adamw, adafactor and sgd with
// momentum, lion) on bf16 parameters on `device` (several working sets, see
// optim/optimizer.h; one parameter without a gradient, one fp32) beside the
// same optimizer on fp32 copies that restart from our rounded values every
// step. "" when every bf16 value is the fp32 update with its low 16 bits
// dropped or one bf16 step further from zero (stochastic rounding), both ways
// occurring in every large tensor, and the other two parameters are right;
// else the first difference, naming the optimizer.
std::string bf16_working_set_mismatch(const torch::Device& device);

// A group of one rank for optim/matrix_owners.h whose exchanges log in `events` when each starts and
// arrives ("start N", "arrive N", numbered in start order), and a matrix lying whole in it.
MatrixGroup logged_group(std::vector<std::string>& events);
MatrixShards whole_on_one_rank(std::vector<int64_t> sizes);

// Three Muon steps (fp32 iteration) on `device` of six matrices, four of them "sharded" over a group
// of one rank (the owners' path, its exchanges and the pipeline) in working sets of one matrix,
// against the same steps on whole matrices, for fp32 and bf16 parameters: "" when they agree (1e-6;
// bf16: 1e-2) and the sharded sets were exchanged, else the first difference.
std::string muon_pipelined_mismatch(const torch::Device& device);

}  // namespace gputrain::test
