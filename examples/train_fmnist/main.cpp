// SPDX-License-Identifier: Apache-2.0
// Trains fmnist-cnn with saturate's library API, the way a user's own program would.
// Usage: train_fmnist [DATA_SPEC] [STEPS]   (defaults: fashion-mnist, 100)
#include <cstdlib>
#include <iostream>

#include <saturate/core/error.h>
#include <saturate/data/dataset.h>
#include <saturate/device/device_spec.h>
#include <saturate/device/probe.h>
#include <saturate/device/threads.h>
#include <saturate/models/model.h>
#include <saturate/telemetry/console_progress.h>
#include <saturate/train/trainer.h>

int main(int argc, char** argv) {
  try {
    const std::string data_spec = argc > 1 ? argv[1] : "fashion-mnist";
    saturate::TrainOptions options;
    options.steps = argc > 2 ? std::atoll(argv[2]) : 100;

    const int threads = saturate::configure_threads(0);
    const auto device =
        saturate::select_device(saturate::DeviceSpec::parse("auto"), saturate::probe_devices());
    const saturate::DatasetSplits data = saturate::load_dataset(data_spec);

    saturate::seed_everything(options.seed);
    auto model = saturate::make_model(
        "fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
    saturate::Trainer trainer(*model, options, device.device);
    saturate::ConsoleProgress progress(std::cerr, /*is_tty=*/false);
    const saturate::TrainSummary s = trainer.fit(data, &progress);

    std::cout << "device " << device.device.str() << ", " << threads << " threads: " << s.steps
              << " steps, " << s.samples_per_s << " samples/s, test accuracy "
              << s.test_accuracy << "\n";
    return 0;
  } catch (const saturate::Error& e) {
    std::cerr << "train_fmnist: " << e.what() << "\n";
    return 2;
  }
}
