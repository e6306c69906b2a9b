// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/exec_command.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/train/precision.h"

namespace saturate {
namespace {

constexpr const char* kComponent = "exec";

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool is_setting(const std::string& name) {
  const auto& names = exec_setting_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Calls f(name, begin, end) for each {name} of a setting inside `word`.
template <typename F>
void for_each_placeholder(const std::string& word, F f) {
  for (size_t open = word.find('{'); open != std::string::npos; open = word.find('{', open + 1)) {
    const size_t close = word.find('}', open);
    if (close == std::string::npos) return;
    const std::string name = word.substr(open + 1, close - open - 1);
    if (is_setting(name)) f(name, open, close + 1);
  }
}

std::string fill_placeholders(std::string word, const ExecSettings& s) {
  for (const std::string& name : exec_setting_names()) {
    const auto it = s.find(name);
    if (it == s.end()) continue;
    const std::string key = "{" + name + "}";
    for (size_t at = word.find(key); at != std::string::npos;
         at = word.find(key, at + it->second.size()))
      word.replace(at, key.size(), it->second);
  }
  return word;
}

// §3's rules 1-3 for one mapped flag.
void apply_map(std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  bool found = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == flag && i + 1 < argv.size()) {
      argv[i + 1] = value;
      found = true;
      ++i;
    } else if (argv[i].rfind(flag + "=", 0) == 0) {
      argv[i] = flag + "=" + value;
      found = true;
    }
  }
  if (!found) argv.insert(argv.end(), {flag, value});
}

}  // namespace

const std::vector<std::string>& exec_setting_names() {
  static const std::vector<std::string> names = {"batch_size", "grad_accum", "precision",
                                                 "num_workers", "prefetch", "pin_memory",
                                                 "max_steps", "seed"};
  return names;
}

std::pair<std::string, std::string> parse_exec_map(const std::string& text) {
  const size_t eq = text.find('=');
  SATURATE_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), kComponent,
                 ": --map must be NAME=FLAG (for example batch_size=--batch-size), got '", text,
                 "'");
  const std::string name = text.substr(0, eq);
  SATURATE_CHECK(is_setting(name), kComponent, ": --map: unknown setting '", name, "'",
                 did_you_mean(name, exec_setting_names()), " (settings: ",
                 join(exec_setting_names(), ", "), ")");
  return {name, text.substr(eq + 1)};
}

std::set<std::string> exec_placeholders(const ExecCommand& c) {
  std::set<std::string> used;
  for (const std::string& word : c.argv)
    for_each_placeholder(word, [&](const std::string& name, size_t, size_t) { used.insert(name); });
  return used;
}

void check_exec_command(const ExecCommand& c, const std::set<std::string>& always_set) {
  SATURATE_CHECK(!c.argv.empty(), kComponent, ": no command after '--' (usage: saturate tune "
                 "--exec [FLAGS] -- python train.py ...)");
  for (const auto& [name, flag] : c.maps)
    SATURATE_CHECK(c.argv.back() != flag, kComponent, ": --map ", name, "=", flag, ": '", flag,
                   "' is the command's last word, with no value after it to replace");
  for (const std::string& name : exec_placeholders(c))
    SATURATE_CHECK(always_set.count(name) > 0, kComponent, ": the command's {", name,
                   "} placeholder has no value in some runs (saturate does not always set ",
                   name, "); give it with its flag or use --map");
}

std::vector<std::string> exec_argv(const ExecCommand& c, const ExecSettings& s) {
  std::vector<std::string> argv;
  for (const std::string& word : c.argv) argv.push_back(fill_placeholders(word, s));
  for (const auto& [name, flag] : c.maps)
    if (const auto it = s.find(name); it != s.end()) apply_map(argv, flag, it->second);
  return argv;
}

ExecSettings exec_settings(const RunConfig& config, int64_t max_steps, bool pin_memory) {
  ExecSettings s;
  s["batch_size"] = std::to_string(config.micro_batch());
  s["grad_accum"] = std::to_string(std::max<int64_t>(1, config.train.accumulate));
  s["precision"] = to_string(config.train.precision);
  s["num_workers"] = std::to_string(std::max(0, config.workers));
  s["prefetch"] = std::to_string(std::max(1, config.prefetch));
  s["seed"] = std::to_string(config.train.seed);
  if (max_steps > 0) s["max_steps"] = std::to_string(max_steps);
  if (pin_memory) s["pin_memory"] = "1";
  return s;
}

std::string exec_metrics_path(const ExecCommand& c, const std::string& run_dir) {
  return c.metrics_on_stdout ? "" : run_dir + "/metrics.jsonl";
}

std::vector<std::pair<std::string, std::string>> exec_environment(const ExecCommand& c,
                                                                  const ExecSettings& s,
                                                                  const std::string& trial,
                                                                  const std::string& run_dir) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"SATURATE_PROTOCOL", std::to_string(kExecProtocolVersion)},
      {"SATURATE_TRIAL", trial},
      {"SATURATE_RUN_DIR", run_dir}};
  if (!c.metrics_on_stdout) env.emplace_back("SATURATE_METRICS", exec_metrics_path(c, run_dir));
  for (const std::string& name : exec_setting_names())
    if (const auto it = s.find(name); it != s.end())
      env.emplace_back("SATURATE_" + upper(name), it->second);
  env.emplace_back("TORCHELASTIC_ERROR_FILE", run_dir + "/error.json");
  env.emplace_back("PYTHONUNBUFFERED", "1");
  if (!c.autohook_dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    env.emplace_back("PYTHONPATH", c.autohook_dir + (old != nullptr && *old != '\0'
                                                         ? std::string(":") + old
                                                         : std::string()));
  }
  return env;
}

std::set<std::string> exec_applied(const ExecCommand& c, const ExecSettings& passed,
                                   const ExecStart* start) {
  std::set<std::string> applied;
  if (start != nullptr)
    for (const auto& [name, value] : start->applied.items())
      if (is_setting(name)) applied.insert(name);
  for (const auto& [name, flag] : c.maps)
    if (passed.count(name) > 0) applied.insert(name);
  for (const std::string& name : exec_placeholders(c))
    if (passed.count(name) > 0) applied.insert(name);
  applied.erase("max_steps");
  return applied;
}

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::string("-_./=:,+@%").find(ch) !=
                                                               std::string::npos;
  });
  if (plain) return word;
  std::string q = "'";
  for (char ch : word) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::vector<std::pair<std::string, std::string>> exec_standalone_environment(
    const ExecSettings& s) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"SATURATE_PROTOCOL", std::to_string(kExecProtocolVersion)},
      {"SATURATE_METRICS", "/dev/null"}};
  for (const std::string& name : exec_setting_names())
    if (const auto it = s.find(name); it != s.end())
      env.emplace_back("SATURATE_" + upper(name), it->second);
  return env;
}

std::string exec_reproduce_line(const ExecCommand& c, const ExecSettings& s) {
  ExecSettings no_limit = s;
  no_limit.erase("max_steps");
  std::vector<std::string> words;
  for (const auto& [name, value] : exec_standalone_environment(no_limit))
    words.push_back(name + "=" + shell_quote(value));
  for (const std::string& word : exec_argv(c, no_limit)) words.push_back(shell_quote(word));
  return join(words, " ");
}

}  // namespace saturate
