// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>

namespace saturate {
namespace {

// The few NVML types and constants we use, declared here so that nvml.h is neither included nor
// linked: the library is found at run time or not at all. Values from the NVML reference.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlReturn_t = int;  // an enum in nvml.h; int-sized on every supported ABI
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_CLOCK_SM = 1;
constexpr unsigned int kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
// nvmlProcessInfo_v2_t, what the _v2 and _v3 process queries fill.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned int kMaxProcesses = 256;  // per GPU and query

struct ThrottleBit {
  uint64_t bit;
  const char* name;
};
constexpr ThrottleBit kThrottleBits[] = {
    {0x1, "gpu_idle"},
    {0x2, "applications_clocks_setting"},
    {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},
    {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"},
    {0x80, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
};

std::string choose_library_path(const std::string& requested) {
  if (!requested.empty()) return requested;
  const char* env = std::getenv("SATURATE_NVML_LIBRARY");
  if (env != nullptr && *env != '\0') return env;
  return "libnvidia-ml.so.1";
}

template <typename Fn>
Fn find_symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(handle, name));
}

}  // namespace

std::vector<std::string> nvml_throttle_reason_names(uint64_t reasons) {
  std::vector<std::string> names;
  for (const ThrottleBit& b : kThrottleBits) {
    if (reasons & b.bit) names.emplace_back(b.name);
  }
  return names;
}

struct Nvml::Api {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*get_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t*) = nullptr;
  // Optional: a driver without one of these leaves the matching field unreported.
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*get_temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*get_energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*get_clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*get_throttle)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*get_processes)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*) = nullptr;

  ~Api() {
    if (shutdown != nullptr) shutdown();
    if (handle != nullptr) ::dlclose(handle);
  }
};

Nvml::Nvml(const std::string& library_path) : library_path_(choose_library_path(library_path)) {
  auto api = std::make_unique<Api>();
  api->handle = ::dlopen(library_path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* err = ::dlerror();
    unavailable_reason_ = "no NVML: " + library_path_ + " cannot be loaded (" +
                          (err != nullptr ? err : "unknown dlopen error") + ")";
    return;
  }
  void* h = api->handle;
  api->init = find_symbol<decltype(api->init)>(h, "nvmlInit_v2");
  auto shutdown = find_symbol<decltype(api->shutdown)>(h, "nvmlShutdown");
  api->get_count = find_symbol<decltype(api->get_count)>(h, "nvmlDeviceGetCount_v2");
  api->get_handle = find_symbol<decltype(api->get_handle)>(h, "nvmlDeviceGetHandleByIndex_v2");
  const char* missing = api->init == nullptr         ? "nvmlInit_v2"
                        : shutdown == nullptr        ? "nvmlShutdown"
                        : api->get_count == nullptr  ? "nvmlDeviceGetCount_v2"
                        : api->get_handle == nullptr ? "nvmlDeviceGetHandleByIndex_v2"
                                                     : nullptr;
  if (missing != nullptr) {
    unavailable_reason_ = "no NVML: " + library_path_ + " lacks " + missing;
    return;  // ~Api unloads the library; shutdown is still null, so it is not called
  }
  const nvmlReturn_t rc = api->init();
  if (rc != NVML_SUCCESS) {
    unavailable_reason_ = "NVML init failed (code " + std::to_string(rc) + ")";
    return;
  }
  api->shutdown = shutdown;  // only now: shut down exactly what was initialised
  api->get_name = find_symbol<decltype(api->get_name)>(h, "nvmlDeviceGetName");
  api->get_utilization =
      find_symbol<decltype(api->get_utilization)>(h, "nvmlDeviceGetUtilizationRates");
  api->get_memory = find_symbol<decltype(api->get_memory)>(h, "nvmlDeviceGetMemoryInfo");
  api->get_temperature = find_symbol<decltype(api->get_temperature)>(h, "nvmlDeviceGetTemperature");
  api->get_power = find_symbol<decltype(api->get_power)>(h, "nvmlDeviceGetPowerUsage");
  api->get_energy =
      find_symbol<decltype(api->get_energy)>(h, "nvmlDeviceGetTotalEnergyConsumption");
  api->get_clock = find_symbol<decltype(api->get_clock)>(h, "nvmlDeviceGetClockInfo");
  api->get_throttle =
      find_symbol<decltype(api->get_throttle)>(h, "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (api->get_throttle == nullptr) {
    // Newer drivers renamed the call; the mask is the same.
    api->get_throttle =
        find_symbol<decltype(api->get_throttle)>(h, "nvmlDeviceGetCurrentClocksEventReasons");
  }
  api->get_processes =
      find_symbol<decltype(api->get_processes)>(h, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (api->get_processes == nullptr)  // older drivers: the same struct under _v2
    api->get_processes =
        find_symbol<decltype(api->get_processes)>(h, "nvmlDeviceGetComputeRunningProcesses_v2");
  api_ = std::move(api);
}

Nvml::~Nvml() = default;

bool Nvml::is_loaded() const { return api_ != nullptr; }

const std::string& Nvml::unavailable_reason() const { return unavailable_reason_; }

int Nvml::device_count() const {
  unsigned int count = 0;
  if (api_ == nullptr || api_->get_count(&count) != NVML_SUCCESS) return 0;
  return static_cast<int>(count);
}

std::vector<GpuSample> Nvml::sample() const {
  std::vector<GpuSample> gpus;
  const int count = device_count();
  gpus.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->get_handle(static_cast<unsigned int>(i), &dev) != NVML_SUCCESS) continue;
    GpuSample g;
    g.index = i;
    if (api_->get_name != nullptr) {
      char name[kNameBufferSize] = {};
      if (api_->get_name(dev, name, kNameBufferSize) == NVML_SUCCESS) {
        name[kNameBufferSize - 1] = '\0';
        g.name = name;
      }
    }
    nvmlUtilization_t util{};
    if (api_->get_utilization != nullptr && api_->get_utilization(dev, &util) == NVML_SUCCESS) {
      g.util_pct = util.gpu;
    }
    nvmlMemory_t mem{};
    if (api_->get_memory != nullptr && api_->get_memory(dev, &mem) == NVML_SUCCESS) {
      g.mem_used_bytes = static_cast<int64_t>(mem.used);
      g.mem_total_bytes = static_cast<int64_t>(mem.total);
    }
    unsigned int value = 0;
    if (api_->get_temperature != nullptr &&
        api_->get_temperature(dev, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
      g.temperature_c = value;
    }
    if (api_->get_power != nullptr && api_->get_power(dev, &value) == NVML_SUCCESS) {
      g.power_w = value / 1000.0;  // mW
    }
    unsigned long long wide = 0;
    if (api_->get_energy != nullptr && api_->get_energy(dev, &wide) == NVML_SUCCESS) {
      g.energy_j = static_cast<double>(wide) / 1000.0;  // mJ
    }
    if (api_->get_clock != nullptr && api_->get_clock(dev, NVML_CLOCK_SM, &value) == NVML_SUCCESS) {
      g.sm_clock_mhz = value;
    }
    if (api_->get_throttle != nullptr && api_->get_throttle(dev, &wide) == NVML_SUCCESS) {
      g.throttle_reasons = wide;
      g.throttle_names = nvml_throttle_reason_names(wide);
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::vector<Nvml::Process> Nvml::processes() const {
  std::vector<Process> found;
  if (api_ == nullptr || api_->get_processes == nullptr) return found;
  const int count = device_count();
  for (int i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->get_handle(static_cast<unsigned int>(i), &dev) != NVML_SUCCESS) continue;
    std::array<nvmlProcessInfo_t, kMaxProcesses> infos{};
    unsigned int n = static_cast<unsigned int>(infos.size());
    if (api_->get_processes(dev, &n, infos.data()) != NVML_SUCCESS) continue;
    for (unsigned int k = 0; k < std::min<unsigned int>(n, kMaxProcesses); ++k) {
      // NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot attribute memory.
      const unsigned long long used = infos[k].usedGpuMemory;
      found.push_back({i, static_cast<int64_t>(infos[k].pid),
                       used == ~0ull ? -1 : static_cast<int64_t>(used)});
    }
  }
  return found;
}

}  // namespace saturate
