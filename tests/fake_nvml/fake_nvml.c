/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for libnvidia-ml.so.1 with fixed values, so the NVML sampler is tested on machines
 * without the NVIDIA driver. It exports the symbols saturate::Nvml resolves and reports:
 *
 *   2 GPUs, named "Fake GPU 0" and "Fake GPU 1"
 *   utilization        gpu 37 %, memory 12 %
 *   memory             1 GiB used, 79 GiB free, 80 GiB total
 *   temperature        55 C
 *   power              250000 mW (250 W)
 *   energy counter     starts at 1000000 mJ per GPU and grows by 1000 mJ on every call
 *   SM clock           1410 MHz
 *   throttle reasons   GPU 0: none; GPU 1: SwPowerCap | HwThermalSlowdown (0x4 | 0x40)
 *
 * Calls before nvmlInit_v2 fail with NVML_ERROR_UNINITIALIZED (1) and a bad device index with
 * NVML_ERROR_INVALID_ARGUMENT (2). Setting FAKE_NVML_INIT_ERROR=<code> makes nvmlInit_v2 return
 * that code. */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st {
  unsigned int index;
} *nvmlDevice_t;
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_INSUFFICIENT_SIZE = 7
};
#define FAKE_GPU_COUNT 2u
#define FAKE_GIB (1024ull * 1024ull * 1024ull)

static struct nvmlDevice_st g_devices[FAKE_GPU_COUNT] = {{0}, {1}};
static unsigned long long g_energy_mj[FAKE_GPU_COUNT] = {1000000ull, 1000000ull};
static int g_init_count = 0;

static int valid(nvmlDevice_t dev) {
  return g_init_count > 0 && dev != NULL && dev->index < FAKE_GPU_COUNT;
}
static nvmlReturn_t check(nvmlDevice_t dev, const void* out) {
  if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!valid(dev) || out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
  const char* forced = getenv("FAKE_NVML_INIT_ERROR");
  if (forced != NULL && *forced != '\0') return atoi(forced);
  ++g_init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *count = FAKE_GPU_COUNT;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (index >= FAKE_GPU_COUNT || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned int length) {
  nvmlReturn_t rc = check(dev, name);
  if (rc != NVML_SUCCESS) return rc;
  if (length < sizeof "Fake GPU 0") return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(name, "Fake GPU 0", sizeof "Fake GPU 0");
  name[9] = (char)('0' + dev->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t* util) {
  nvmlReturn_t rc = check(dev, util);
  if (rc != NVML_SUCCESS) return rc;
  util->gpu = 37;
  util->memory = 12;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t* mem) {
  nvmlReturn_t rc = check(dev, mem);
  if (rc != NVML_SUCCESS) return rc;
  mem->total = 80 * FAKE_GIB;
  mem->used = 1 * FAKE_GIB;
  mem->free = 79 * FAKE_GIB;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int* temp) {
  nvmlReturn_t rc = check(dev, temp);
  if (rc != NVML_SUCCESS) return rc;
  if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* only NVML_TEMPERATURE_GPU */
  *temp = 55;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int* milliwatts) {
  nvmlReturn_t rc = check(dev, milliwatts);
  if (rc != NVML_SUCCESS) return rc;
  *milliwatts = 250000;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t dev, unsigned long long* mj) {
  nvmlReturn_t rc = check(dev, mj);
  if (rc != NVML_SUCCESS) return rc;
  g_energy_mj[dev->index] += 1000;
  *mj = g_energy_mj[dev->index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int* mhz) {
  nvmlReturn_t rc = check(dev, mhz);
  if (rc != NVML_SUCCESS) return rc;
  if (type != 1) return NVML_ERROR_NOT_SUPPORTED; /* only NVML_CLOCK_SM */
  *mhz = 1410;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev,
                                                       unsigned long long* reasons) {
  nvmlReturn_t rc = check(dev, reasons);
  if (rc != NVML_SUCCESS) return rc;
  *reasons = dev->index == 1 ? (0x4ull | 0x40ull) : 0ull;
  return NVML_SUCCESS;
}

/* Compute processes: none, unless FAKE_NVML_PID_FILE names a file of PIDs (one a line, at most
 * 16), each then reported on GPU 0 holding 512 MiB. The struct is NVML's nvmlProcessInfo_v2_t. */
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#include <stdio.h>

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  nvmlReturn_t rc = check(dev, count);
  if (rc != NVML_SUCCESS) return rc;
  unsigned int pids[16];
  unsigned int found = 0;
  const char* path = getenv("FAKE_NVML_PID_FILE");
  FILE* f = dev->index == 0 && path != NULL ? fopen(path, "r") : NULL;
  if (f != NULL) {
    while (found < 16 && fscanf(f, "%u", &pids[found]) == 1) ++found;
    fclose(f);
  }
  if (infos == NULL || *count < found) {
    *count = found;
    return found == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < found; ++i) {
    infos[i].pid = pids[i];
    infos[i].usedGpuMemory = 512ull * 1024ull * 1024ull;
    infos[i].gpuInstanceId = 0xFFFFFFFFu;
    infos[i].computeInstanceId = 0xFFFFFFFFu;
  }
  *count = found;
  return NVML_SUCCESS;
}
