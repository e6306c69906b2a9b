// SPDX-License-Identifier: Apache-2.0
#pragma once
// TorchTrialRunner: trials as real LibTorch training steps, in this process. Every trial builds
// the model afresh from the configuration's seed (so each starts from the same weights and no
// trial can leak optimizer state into the next), trains through the Loader with the trial's
// workers and prefetch (the input pipeline is part of what is measured), catches out-of-memory by type, then frees everything and
// hands cached memory back.
//
//   auto memory = make_device_memory(device, limit);
//   TorchTrialRunner runner("fmnist-cnn", data, device, *memory);
//   TrialOutcome t = runner.run({config, 4});

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

#include "saturate/data/dataset.h"
#include "saturate/data/sample_source.h"
#include "saturate/tune/trial.h"

namespace saturate {

class DeviceMemory;

class TorchTrialRunner : public TrialRunner {
 public:
  /// `data` and `memory` must outlive the runner. `memory_limit_bytes` is what the search
  /// plans against: the memory's own limit when it has one, else this value (0 = the device's
  /// total, or on CPU the memory available at start).
  TorchTrialRunner(std::string model_spec, const DatasetSplits& data, c10::Device device,
                   DeviceMemory& memory, int64_t max_batch = 1 << 16);
  TrialOutcome run(const TrialRequest& request) override;
  QualityRun train_and_validate(const TrialConfig& config, int64_t samples) override;
  int64_t memory_limit_bytes() const override { return limit_bytes_; }
  int64_t max_batch_size() const override { return max_batch_; }

 private:
  std::string model_spec_;
  const DatasetSplits& data_;
  c10::Device device_;
  DeviceMemory& memory_;
  int64_t limit_bytes_ = 0;
  int64_t max_batch_ = 0;
  std::unique_ptr<SampleSource> source_;  // the training split, read by each trial's Loader
};

}  // namespace saturate
