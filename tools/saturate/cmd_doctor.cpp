// SPDX-License-Identifier: Apache-2.0
// saturate doctor: each environment check with ok/warn/fail and a fix; --json for machines.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/data/dataset.h"
#include "saturate/data/sample_source.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/doctor.h"
#include "saturate/device/probe.h"
#include "saturate/device/threads.h"
#include "saturate/report/context.h"

namespace saturate::cli {
namespace {

using detail::concat;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out;
  for (int64_t d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// Any spec other than fashion-mnist (whose check knows the Debian package) is opened as train
// opens it: the same readers, so doctor accepts exactly what train accepts and names the file
// at fault when it does not.
DoctorCheck check_data_as_train_opens_it(const std::string& spec) {
  DoctorCheck c;
  c.name = "dataset";
  try {
    if (spec.rfind("synthetic:", 0) == 0) {
      const std::unique_ptr<SampleSource> s = make_synthetic_source(spec);
      c.status = CheckStatus::kOk;
      c.detail = concat(spec, ": ", s->size(), " generated samples of ",
                        shape_text(s->sample_shape()), ", ", s->num_classes(), " classes");
    } else {
      const OpenedDataset d = open_dataset(spec);
      c.status = CheckStatus::kOk;
      c.detail = concat(spec, ": ", d.train->size(), " train samples",
                        d.streamed ? " (read as training streams them)" : "", ", ",
                        d.splits.test.size(), " test, ", shape_text(d.train->sample_shape()),
                        ", ", d.train->num_classes(), " classes");
    }
  } catch (const Error& e) {
    c.status = CheckStatus::kFail;
    c.detail = e.what();
    c.fix = "pass a spec train accepts: " + join(dataset_spec_examples(), ", ") +
            " or synthetic:C,H,W,CLASSES,COUNT";
  }
  return c;
}

}  // namespace

int run_doctor(const std::vector<std::string>& args) {
  DoctorOptions opts;
  bool as_json = false;
  bool no_gemm = false;
  int threads = 0;
  CLI::App app{"Check the environment for what makes training slow or impossible.",
               "saturate doctor"};
  app.add_flag("--json", as_json, "print the checks as JSON");
  app.add_option("--data", opts.data_spec, "the data a run would use")->capture_default_str();
  app.add_option("--threads", threads, "LibTorch intra-op threads to check; 0 = usable cores")
      ->capture_default_str();
  app.add_flag("--no-gemm", no_gemm, "skip the matmul timing");
  if (!parse_args(app, args)) return 0;
  opts.measure_gemm = !no_gemm;
  opts.check_data = check_data_as_train_opens_it;

  const int threads_in_effect = configure_threads(threads);
  const DeviceProbe probe = probe_devices();
  const std::vector<DoctorCheck> checks = run_doctor(opts, probe);
  // The environment rules of diagnose, for the device a run would pick (the blas check above
  // has timed the GEMM; the rules here judge the BLAS by name).
  const DeviceChoice choice = select_device(DeviceSpec::parse("auto"), probe);
  const std::vector<Finding> findings = diagnose_environment(
      environment_facts(probe, choice.device, threads_in_effect, /*gemm_gflops=*/-1.0));
  bool any_fail = false;
  for (const auto& c : checks) any_fail = any_fail || c.status == CheckStatus::kFail;

  if (as_json) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["context"] = run_context(probe, "cpu");
    j["checks"] = nlohmann::json::array();
    for (const auto& c : checks)
      j["checks"].push_back(
          {{"name", c.name}, {"status", to_string(c.status)}, {"detail", c.detail}, {"fix", c.fix}});
    j["findings"] = findings_to_json(findings);
    j["ok"] = !any_fail;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "saturate doctor\n";
    for (const auto& c : checks) {
      std::string status = to_string(c.status);
      status.resize(6, ' ');
      std::string name = c.name;
      name.resize(10, ' ');
      std::cout << "  " << status << name << c.detail << "\n";
      if (!c.fix.empty()) std::cout << "        " << std::string(10, ' ') << "fix: " << c.fix << "\n";
    }
    print_findings(std::cout, findings);
  }
  return static_cast<int>(any_fail ? ExitCode::kFailure : ExitCode::kOk);
}

}  // namespace saturate::cli
