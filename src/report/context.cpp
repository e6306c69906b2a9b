// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/context.h"

#include <unistd.h>

#include <ctime>

#include "saturate/core/build_info.h"
#include "saturate/device/probe.h"

namespace saturate {
namespace {

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

nlohmann::json run_context(const DeviceProbe& probe, const std::string& device) {
  nlohmann::json ctx;
  ctx["host"] = host_name();
  ctx["date"] = utc_now_iso8601();
  ctx["cpu"] = probe.cpu.model;
  ctx["cpu_cores_usable"] = probe.cpu.cores_usable;
  ctx["mem_total_bytes"] = probe.cpu.mem_total_bytes;
  ctx["device"] = device;
  if (device.rfind("cuda", 0) == 0) {
    const size_t colon = device.find(':');
    const int index = colon == std::string::npos ? 0 : std::stoi(device.substr(colon + 1));
    for (const auto& g : probe.gpus) {
      if (g.index != index) continue;
      ctx["gpu"] = g.name;
      ctx["gpu_mem_total_bytes"] = g.mem_total_bytes;
    }
    ctx["cuda_runtime"] = probe.cuda_runtime_version;
    ctx["cudnn"] = probe.cudnn_version;
  }
  ctx["torch_version"] = probe.torch_version;
  ctx["blas"] = probe.blas.name;
  ctx["intra_op_threads"] = probe.intra_op_threads;
  ctx["saturate_version"] = SATURATE_VERSION;
  ctx["git_sha"] = SATURATE_GIT_SHA;
  ctx["build_type"] = SATURATE_BUILD_TYPE;
  ctx["built_with_cuda"] = SATURATE_BUILT_WITH_CUDA == 1;
  return ctx;
}

}  // namespace saturate
