// SPDX-License-Identifier: Apache-2.0
// saturate tune: the staged search for the fastest configuration that keeps quality, written
// as a plan that `saturate train --config` runs.
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>

#include "command.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/probe.h"
#include "saturate/device/threads.h"
#include "saturate/report/context.h"
#include "saturate/telemetry/step_record.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/torch_trial_runner.h"
#include "saturate/tune/tuner.h"

namespace saturate::cli {
namespace {

// The reduced precisions this device runs, besides the baseline's.
std::vector<Precision> precision_candidates(const c10::Device& device, const DeviceProbe& probe,
                                            Precision base) {
  std::vector<Precision> out;
  for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    if (p == base) continue;
    try {
      out.push_back(resolve_precision(p, device, probe).precision);
    } catch (const Error&) {
      // not supported here; resolve_precision says why when asked directly
    }
  }
  return out;
}

void print_stage(std::ostream& out, const PlanStage& s) {
  std::string name = s.name;
  name.resize(14, ' ');
  out << "  " << name;
  if (s.before_samples_per_s > 0) {
    out << format_fixed(s.before_samples_per_s, 1) << " → " << format_fixed(s.after_samples_per_s, 1)
        << " samples/s" << (s.changed ? " (changed)" : "");
  } else if (s.after_samples_per_s > 0) {
    out << format_fixed(s.after_samples_per_s, 1) << " samples/s";
  }
  out << "\n      " << s.why << "\n";
}

}  // namespace

int run_tune(const std::vector<std::string>& args) {
  TrialConfig base;
  base.train.evaluate = false;
  std::string model_spec = "fmnist-cnn", data_spec = "fashion-mnist", device_text = "auto";
  std::string precision_text = "fp32", optimizer_text = "adamw", memory_limit_text;
  std::string out_path = "plan.json", prefer_text = "faster", effective_text = "auto";
  int threads_requested = 0;
  int64_t quality_samples = -1;
  TuneOptions o;
  o.search.max_batch = 4096;  // CPU steps at larger batches take seconds each
  CLI::App app{"Find the fastest configuration that fits in memory and keeps quality, and write "
               "it as a plan for `saturate train --config`.",
               "saturate tune"};
  app.add_option("--model", model_spec, "fmnist-cnn, mlp, mlp-deep, resnet18-cifar or PATH.pt")
      ->capture_default_str();
  app.add_option("--data", data_spec,
                 "fashion-mnist, mnist, idx:DIR, cifar10:DIR, cifar100:DIR, npy:DIR, records:DIR "
                 "or folder:DIR[@HxWxC]")
      ->capture_default_str();
  app.add_option("--device", device_text, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--batch-size", base.train.batch_size, "your batch size (the baseline)")
      ->capture_default_str();
  app.add_option("--lr", base.train.lr, "your peak learning rate")->capture_default_str();
  app.add_option("--optimizer", optimizer_text, "sgd or adamw")->capture_default_str();
  app.add_option("--precision", precision_text, "your precision (the baseline)")
      ->capture_default_str();
  app.add_option("--seed", base.train.seed, "seed of every trial and quality run")
      ->capture_default_str();
  app.add_option("--threads", threads_requested, "intra-op threads; 0 = usable cores")
      ->capture_default_str();
  app.add_option("--memory-limit", memory_limit_text,
                 "plan for this much device memory, e.g. 2GiB (default: the device's)");
  app.add_option("--reserve", o.search.reserve, "share of the memory limit kept free")
      ->capture_default_str();
  app.add_option("--max-batch", o.search.max_batch, "largest batch size to consider")
      ->capture_default_str();
  app.add_option("--prefer", prefer_text,
                 "faster: the fastest batch; smaller: the smallest within --tolerance of it")
      ->capture_default_str();
  app.add_option("--tolerance", o.search.tolerance, "for --prefer smaller")->capture_default_str();
  app.add_option("--effective-batch", effective_text,
                 "auto: keep your batch through accumulation when the batch shrinks, rescale the "
                 "LR when it grows; keep; rescale")
      ->capture_default_str();
  app.add_option("--quality-samples", quality_samples,
                 "training samples per quality-guard run (default: one epoch; 0 skips the guard)");
  app.add_option("--quality-tolerance", o.quality_tolerance,
                 "largest accepted drop in test accuracy (absolute, 0.01 = 1 point)")
      ->capture_default_str();
  app.add_option("--measure-steps", o.measure_steps, "steps per measurement (first untimed)")
      ->capture_default_str();
  app.add_option("--budget-s", o.budget_s, "stop starting optional stages after N seconds")
      ->capture_default_str();
  app.add_option("--out", out_path, "where to write the plan")->capture_default_str();
  if (!parse_args(app, args)) return 0;

  base.train.optimizer = parse_optimizer(optimizer_text);
  const Precision requested = parse_precision(precision_text);
  o.search.prefer = parse_prefer(prefer_text);
  o.effective_batch = parse_effective_batch(effective_text);
  SATURATE_CHECK(o.search.reserve >= 0 && o.search.reserve < 0.9,
                 "tune: --reserve must be in [0, 0.9), got ", o.search.reserve);
  SATURATE_CHECK(o.search.max_batch >= 1, "tune: --max-batch must be positive");
  SATURATE_CHECK(o.measure_steps >= 2, "tune: --measure-steps must be at least 2");
  SATURATE_CHECK(o.budget_s >= 0, "tune: --budget-s must not be negative");
  const int64_t memory_limit =
      memory_limit_text.empty() ? 0 : parse_bytes(memory_limit_text, "--memory-limit");
  check_writable(out_path, "--out");  // before any work

  const DeviceSpec spec = DeviceSpec::parse(device_text);
  const int threads = configure_threads(threads_requested);
  const DeviceProbe probe = probe_devices();
  const DeviceChoice choice = select_device(spec, probe);
  base.train.precision = resolve_precision(requested, choice.device, probe).precision;
  base.train.validate();
  o.precisions = precision_candidates(choice.device, probe, base.train.precision);
  if (choice.device.is_cpu() && threads > 1) o.threads = {threads, threads / 2};
  o.max_workers = std::max(1, probe.cpu.cores_usable);
  base.threads = threads;
  const DatasetSplits data = load_dataset(data_spec);
  o.quality_samples = quality_samples >= 0 ? quality_samples : data.train.size();
  // After the data is loaded: the budget is for training, not the dataset.
  auto memory = make_device_memory(choice.device, memory_limit);
  TorchTrialRunner runner(model_spec, data, choice.device, *memory, o.search.max_batch);

  // The header waits for the first stage: a model that cannot run one step fails before any
  // output.
  bool header_printed = false;
  Plan plan = tune(runner, base, o, [&](const PlanStage& s) {
    if (!header_printed) {
      std::cout << "saturate tune: " << model_spec << " on " << data_spec << ", "
                << choice.device.str() << ", " << threads << " threads, memory "
                << format_bytes(runner.memory_limit_bytes()) << " less "
                << format_fixed(100 * o.search.reserve, 0) << "% reserve\n";
      header_printed = true;
    }
    print_stage(std::cout, s);
    std::cout.flush();
  });
  plan.model = model_spec;
  plan.data = data_spec;
  plan.device = choice.device.str();
  plan.memory_limit_bytes = memory_limit;
  // What still holds the tuned configuration back, from its measured step breakdown.
  RunFacts facts = environment_facts(probe, choice.device, plan.config.threads,
                                     choice.device.is_cpu() ? measure_gemm_gflops(512, 5) : -1.0);
  StepRecord tuned_step;
  const PhaseMeans& ph = plan.tuned.phases;
  tuned_step.data_wait_ms = ph.data_wait_ms;
  tuned_step.host_to_device_ms = ph.host_to_device_ms;
  tuned_step.forward_ms = ph.forward_ms;
  tuned_step.backward_ms = ph.backward_ms;
  tuned_step.optimizer_ms = ph.optimizer_ms;
  tuned_step.other_ms = ph.other_ms;
  tuned_step.step_ms = ph.step_ms;
  facts.steps = {tuned_step};
  facts.precision = to_string(plan.config.train.precision);
  facts.batch_size = plan.config.train.batch_size;
  facts.accumulate = plan.config.train.accumulate;
  facts.checkpoint_segments = plan.config.train.checkpoint_segments;
  facts.workers = plan.config.workers;
  facts.memory_limit_bytes = runner.memory_limit_bytes();
  facts.peak_memory_bytes = plan.tuned.peak_memory_bytes;
  const std::vector<Finding> findings = diagnose(facts);
  nlohmann::json plan_json = to_json(plan);
  plan_json["findings"] = findings_to_json(findings);
  plan_json["context"] = run_context(probe, choice.device.str());
  write_json_file(out_path, plan_json);
  const double gain = plan.baseline.samples_per_s > 0
                          ? plan.tuned.samples_per_s / plan.baseline.samples_per_s
                          : 0.0;
  std::cout << "plan: " << plan.config.describe() << ", lr " << format_fixed(plan.config.train.lr, 6)
            << "\n  " << format_fixed(plan.baseline.samples_per_s, 1) << " → "
            << format_fixed(plan.tuned.samples_per_s, 1) << " samples/s";
  if (gain > 0) std::cout << " (" << format_fixed(gain, 2) << "×)";
  std::cout << ", peak " << format_bytes(plan.tuned.peak_memory_bytes) << "; quality "
            << (plan.quality.accepted ? "accepted" : "not accepted") << "; "
            << plan.probe_steps << " trial steps in " << format_duration_s(plan.tune_wall_s)
            << "\n  written to " << out_path << "; run it with: saturate train --config "
            << out_path << "\n";
  print_findings(std::cout, findings);
  return 0;
}

}  // namespace saturate::cli
