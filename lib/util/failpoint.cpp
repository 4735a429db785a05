#include "util/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

struct Armed {
  std::string name;
  long hit = 1;        // acts at this pass of `name`
  std::string action;  // pause, kill, act, after
  std::string other;   // after: the failpoint waited for
  long other_hit = 1;
};

struct Registry {
  std::mutex mu;
  std::condition_variable passed;
  std::map<std::string, long> passes;
  std::map<std::string, std::function<void()>> hooks;
  std::vector<Armed> armed;
  fs::path dir;
};

Registry& registry() {
  static Registry r;
  return r;
}

// True once anything is armed; read without the lock on every pass.
std::atomic<bool> g_enabled{false};

std::pair<std::string, long> name_and_hit(const std::string& s, const std::string& spec) {
  const size_t at = s.find('@');
  if (at == std::string::npos) return {s, 1};
  char* end = nullptr;
  const long n = std::strtol(s.c_str() + at + 1, &end, 10);
  if (at == 0 || n < 1 || *end != '\0')
    throw usage_error("GPUTRAIN_FAILPOINTS: '" + spec + "' has a bad pass count\n    fix: name@N with N >= 1");
  return {s.substr(0, at), n};
}

// Reads GPUTRAIN_FAILPOINTS once, before the first pass is counted.
void arm_from_environment() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const char* env = std::getenv("GPUTRAIN_FAILPOINTS");
    if (!env || !*env) return;
    Registry& r = registry();
    if (const char* d = std::getenv("GPUTRAIN_FAILPOINT_DIR")) r.dir = d;
    try {
      std::string all = env;
      for (size_t start = 0; start <= all.size();) {
        size_t end = all.find(';', start);
        if (end == std::string::npos) end = all.size();
        const std::string spec = all.substr(start, end - start);
        start = end + 1;
        if (spec.empty()) continue;
        const size_t eq = spec.find('=');
        if (eq == std::string::npos)
          throw usage_error("GPUTRAIN_FAILPOINTS: '" + spec +
                            "' names no action\n    fix: name[@n]=pause|kill|act|after:X[@m]");
        Armed a;
        std::tie(a.name, a.hit) = name_and_hit(spec.substr(0, eq), spec);
        a.action = spec.substr(eq + 1);
        if (a.action.rfind("after:", 0) == 0) {
          std::tie(a.other, a.other_hit) = name_and_hit(a.action.substr(6), spec);
          a.action = "after";
        } else if (a.action != "pause" && a.action != "kill" && a.action != "act") {
          throw usage_error("GPUTRAIN_FAILPOINTS: '" + spec +
                            "' has an unknown action\n    fix: pause, kill, act or after:X[@m]");
        }
        if (a.action == "pause" && r.dir.empty())
          throw usage_error("GPUTRAIN_FAILPOINTS: '" + spec + "' pauses, but GPUTRAIN_FAILPOINT_DIR is not set");
        r.armed.push_back(a);
      }
    } catch (const Error& e) {
      error = e.what();
    }
    g_enabled = true;
  });
  if (!error.empty()) throw usage_error(error);
}

// Every action that acts leaves <dir>/<name>.<pid>.fired first, so a test can require that its
// failpoint fired (a renamed or removed one never does); without a directory, nothing to leave.
void mark_fired(const Registry& r, const std::string& name) {
  if (r.dir.empty()) return;
  write_file_atomic((r.dir / (name + "." + std::to_string(::getpid()) + ".fired")).string(),
                    std::to_string(::getpid()) + "\n");
}

void pause_at(const Registry& r, const std::string& name) {
  const fs::path reached = r.dir / (name + "." + std::to_string(::getpid()) + ".reached");
  const fs::path release = r.dir / (name + ".release");
  write_file_atomic(reached.string(), std::to_string(::getpid()) + "\n");  // tests never see half a marker
  // Waits on an event (the file), not a time: the poll interval only bounds the reaction.
  while (!fs::exists(release)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

void failpoint(const char* name) { failpoint(name, nullptr); }

void failpoint(const char* name, const std::function<void()>& act) {
  arm_from_environment();
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  Registry& r = registry();
  std::function<void()> hook;
  std::vector<Armed> acts;
  {
    std::lock_guard lock(r.mu);
    const long n = ++r.passes[name];
    if (auto h = r.hooks.find(name); h != r.hooks.end()) hook = h->second;
    for (const Armed& a : r.armed)
      if (a.name == name && a.hit == n) acts.push_back(a);
  }
  r.passed.notify_all();
  if (hook) hook();
  for (const Armed& a : acts) {
    mark_fired(r, a.name);
    if (a.action == "kill") ::raise(SIGKILL);
    if (a.action == "pause") pause_at(r, a.name);
    if (a.action == "act" && act) act();
    if (a.action == "after") {
      std::unique_lock lock(r.mu);
      r.passed.wait(lock, [&] { return r.passes[a.other] >= a.other_hit; });
      lock.unlock();
      mark_fired(r, a.other);  // the failpoint waited for was passed too
    }
  }
}

void set_failpoint_hook(const std::string& name, std::function<void()> hook) {
  arm_from_environment();
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (hook) r.hooks[name] = std::move(hook);
  else r.hooks.erase(name);
  g_enabled = true;
}

}  // namespace gputrain
