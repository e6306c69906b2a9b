// SPDX-License-Identifier: Apache-2.0
#pragma once
// The two outputs of a Profile (tune/profile.h): a JSON object (what `saturate profile --json`
// and --summary-json write, and `saturate compare` reads) and the terminal table. Both take
// the findings diagnose() read off the profile; neither measures anything.
//
//   const Profile p = run_profile_job(options, job);
//   const std::vector<Finding> findings = diagnose(profile_facts(p));
//   if (as_json) std::cout << profile_to_json(p, findings).dump(2) << "\n";
//   else write_profile_table(std::cout, p, findings);

#include <iosfwd>
#include <vector>

#include <nlohmann/json.hpp>

#include "saturate/diagnose/diagnose.h"
#include "saturate/tune/profile.h"

namespace saturate {

/// schema_version 1: configuration, samples_per_s (median of windows, spread, each window),
/// step_ms and phases_ms, memory, compute (FLOPs, MFU against its peak and precision),
/// device_samples, host_memory, world_size (and, for several ranks, ranks, job_samples_per_s
/// and scaling), findings and the context block (run_context). Unknown numbers are null.
nlohmann::json profile_to_json(const Profile& profile, const std::vector<Finding>& findings);

/// The table `saturate profile` prints: throughput, the phases with their shares, every rank
/// and the scaling efficiency (several ranks), compute, memory, page faults, CPU and GPU
/// readings, then the findings.
void write_profile_table(std::ostream& out, const Profile& profile,
                         const std::vector<Finding>& findings);

/// `saturate profile --loader-only --json`.
nlohmann::json loader_profile_to_json(const LoaderProfile& profile);
/// `saturate profile --loader-only`.
void write_loader_profile_table(std::ostream& out, const LoaderProfile& profile);

}  // namespace saturate
