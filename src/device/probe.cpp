// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/probe.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "device/cuda_probe_impl.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/device/threads.h"

namespace saturate {
namespace {

// The version of the LibTorch actually loaded ("TORCH_VERSION=2.11.0" in its build settings),
// which can differ from the headers saturate was compiled against.
std::string runtime_torch_version(const std::string& config) {
  const std::string needle = "TORCH_VERSION=";
  const auto pos = config.find(needle);
  if (pos == std::string::npos) return TORCH_VERSION;
  const auto begin = pos + needle.size();
  const auto end = config.find_first_of(", \n", begin);
  const std::string v = config.substr(begin, end == std::string::npos ? end : end - begin);
  return v.empty() ? std::string(TORCH_VERSION) : v;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "" : line.substr(begin);
  }
  return "";
}

// The "flags" line of /proc/cpuinfo, with a space in front so " flag " finds whole words.
std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 5, "flags") != 0) continue;
    const auto colon = line.find(':');
    return colon == std::string::npos ? "" : " " + line.substr(colon + 1) + " ";
  }
  return "";
}

bool has_flag(const std::string& flags, const char* flag) {
  return flags.find(std::string(" ") + flag + " ") != std::string::npos;
}

CpuInfo probe_cpu() {
  CpuInfo cpu;
  cpu.model = cpu_model();
  const std::string flags = cpu_flags();
  cpu.has_bf16 = has_flag(flags, "avx512_bf16") || has_flag(flags, "amx_bf16");
  cpu.has_fp16 = has_flag(flags, "avx512_fp16") || has_flag(flags, "amx_fp16");
  cpu.cores_online = static_cast<int>(std::max(sysconf(_SC_NPROCESSORS_ONLN), 1L));
  cpu.cores_usable = usable_cores();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_bytes > 0) {
    cpu.mem_total_bytes = static_cast<int64_t>(pages) * static_cast<int64_t>(page_bytes);
  }
  return cpu;
}

std::string describe_gpu(const CudaDeviceInfo& gpu) {
  return "cuda:" + std::to_string(gpu.index) + " (" + gpu.name + ", " +
         format_bytes(gpu.mem_total_bytes) + ")";
}

}  // namespace

DeviceProbe probe_devices() {
  DeviceProbe probe;
  probe.torch_version = runtime_torch_version(at::show_config());
  probe.cpu = probe_cpu();
  probe.blas = detect_blas();
  probe.intra_op_threads = at::get_num_threads();
  probe.inter_op_threads = at::get_num_interop_threads();
  detail::probe_cuda(probe);
  return probe;
}

DeviceChoice select_rank_device(const DeviceSpec& spec, const DeviceProbe& probe, int local_rank,
                                int local_world_size) {
  const DeviceChoice one = select_device(spec, probe);
  const bool per_rank = one.device.is_cuda() && spec.index < 0 && local_world_size > 1;
  if (!per_rank) return one;
  const int count = static_cast<int>(probe.gpus.size());
  SATURATE_CHECK(count == 0 || local_world_size <= count, "device: ", local_world_size,
                 " data-parallel ranks on this node but ", count,
                 count == 1 ? " CUDA device is" : " CUDA devices are",
                 " visible: one GPU per rank; start at most ", count,
                 " ranks per node (or check CUDA_VISIBLE_DEVICES)");
  const auto device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local_rank));
  const std::string name =
      local_rank < count ? describe_gpu(probe.gpus[static_cast<size_t>(local_rank)]) : device.str();
  return {device, name + ", local rank " + std::to_string(local_rank) + "'s GPU"};
}

DeviceChoice select_device(const DeviceSpec& spec, const DeviceProbe& probe) {
  const std::string unavailable = probe.cuda_unavailable_reason.empty()
                                      ? std::string("CUDA is not available")
                                      : probe.cuda_unavailable_reason;
  switch (spec.kind) {
    case DeviceKind::kCpu:
      return {c10::Device(c10::DeviceType::CPU), "cpu (requested)"};
    case DeviceKind::kAuto:
      if (!probe.cuda_available) {
        return {c10::Device(c10::DeviceType::CPU), "cpu, because " + unavailable};
      }
      return {c10::Device(c10::DeviceType::CUDA, 0),
              (probe.gpus.empty() ? std::string("cuda:0") : describe_gpu(probe.gpus[0])) +
                  ", the first CUDA device (auto)"};
    case DeviceKind::kCuda:
      break;
  }
  SATURATE_CHECK(probe.cuda_available, "device: ", spec.to_string(), " requested but ", unavailable,
                 "; use --device cpu");
  const int index = spec.index < 0 ? 0 : spec.index;
  const auto device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
  // A probe that says CUDA is available without listing devices (hand-built) has no count.
  if (probe.gpus.empty()) return {device, device.str() + " (requested)"};
  const int count = static_cast<int>(probe.gpus.size());
  SATURATE_CHECK(index < count, "device: ", spec.to_string(), " requested but ", count,
                 count == 1 ? " CUDA device is" : " CUDA devices are", " visible (cuda:0",
                 count > 1 ? " to cuda:" + std::to_string(count - 1) : std::string(),
                 "); pick one of those, or check CUDA_VISIBLE_DEVICES");
  return {device, describe_gpu(probe.gpus[index]) + " (requested)"};
}

}  // namespace saturate
