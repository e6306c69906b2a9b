// SPDX-License-Identifier: Apache-2.0
// bf16 (and, on CUDA, fp16) against fp32: samples/s and peak memory of the same training steps,
// interleaved in one process, medians of several repeats.
//
// Usage: saturate_precision_bench [--device cpu|cuda] [--repeats N] [--models a,b]
//                                 [--batch N] [--steps N] [--data SPEC]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/probe.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/train/trainer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

struct Result {
  double samples_per_s = 0;
  int64_t peak_memory_bytes = 0;
  double final_loss = 0;
};

Result run_once(const std::string& model_name, saturate::Precision precision,
                const saturate::DatasetSplits& data, const c10::Device& device,
                saturate::DeviceMemory& memory, int64_t batch, int64_t steps) {
  saturate::seed_everything(1);
  auto model = saturate::make_model(model_name, {data.train.sample_shape(), data.train.num_classes});
  saturate::TrainOptions o;
  o.batch_size = batch;
  o.steps = steps;
  o.evaluate = false;
  o.timing_warmup_steps = 3;
  o.precision = precision;
  saturate::Trainer trainer(*model, o, device, &memory);
  const saturate::TrainSummary s = trainer.fit(data);
  return {s.samples_per_s, s.peak_memory_bytes, s.final_loss};
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_text = "cpu", data_spec = "fashion-mnist";
  std::string models_text = "fmnist-cnn,resnet18-cifar";
  int repeats = 3;
  int64_t batch = 128, steps = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") device_text = v;
    else if (k == "--repeats") repeats = std::atoi(v.c_str());
    else if (k == "--models") models_text = v;
    else if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--steps") steps = std::atoll(v.c_str());
    else if (k == "--data") data_spec = v;
  }
  const int threads = saturate::configure_threads(0);
  const auto probe = saturate::probe_devices();
  const auto choice = saturate::select_device(saturate::DeviceSpec::parse(device_text), probe);
  const saturate::DatasetSplits data = saturate::load_dataset(data_spec);
  auto memory = saturate::make_device_memory(choice.device, 0);
  std::vector<saturate::Precision> precisions = {saturate::Precision::kFp32,
                                                 saturate::Precision::kBf16};
  if (choice.device.is_cuda()) precisions.push_back(saturate::Precision::kFp16);

  std::printf("precision: %s, %d threads, batch %lld, %d repeats (medians); cpu native bf16: %s\n",
              choice.reason.c_str(), threads, static_cast<long long>(batch), repeats,
              probe.cpu.has_bf16 ? "yes" : "no");
  std::printf("%-16s %-6s %12s %10s %14s %10s %10s\n", "model", "prec", "samples/s", "vs fp32",
              "peak memory", "vs fp32", "loss");
  for (const std::string& model : split(models_text)) {
    // Bigger models get fewer steps so every cell takes seconds, not minutes.
    const int64_t n = steps > 0 ? steps : (model == "resnet18-cifar" ? 8 : 40);
    std::map<saturate::Precision, std::vector<double>> sps, peak, loss;
    for (int r = 0; r < repeats; ++r) {
      for (size_t i = 0; i < precisions.size(); ++i) {
        // Rotate the order each repeat so drift does not favour one precision.
        const auto p = precisions[(i + r) % precisions.size()];
        const Result res = run_once(model, p, data, choice.device, *memory, batch, n);
        sps[p].push_back(res.samples_per_s);
        peak[p].push_back(static_cast<double>(res.peak_memory_bytes));
        loss[p].push_back(res.final_loss);
      }
    }
    const double base_sps = median(sps[saturate::Precision::kFp32]);
    const double base_peak = median(peak[saturate::Precision::kFp32]);
    for (const auto p : precisions) {
      std::printf("%-16s %-6s %12.1f %9.2fx %14s %9.2fx %10.4f\n", model.c_str(),
                  saturate::to_string(p).c_str(), median(sps[p]), median(sps[p]) / base_sps,
                  saturate::format_bytes(static_cast<int64_t>(median(peak[p]))).c_str(),
                  median(peak[p]) / base_peak, median(loss[p]));
    }
  }
  return 0;
}
