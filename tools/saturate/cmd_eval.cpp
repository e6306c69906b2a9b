// SPDX-License-Identifier: Apache-2.0
// saturate eval: a saved model (train --save-model) on a data set's test split (and validation
// split with --val-fraction), fed as it was trained: the same input pipeline and the
// normalisation the file records.
#include <cmath>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "command.h"
#include "recipe.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/models/model.h"
#include "saturate/models/saved_model.h"
#include "saturate/train/trainer.h"

namespace saturate::cli {
namespace {

struct EvalFlags {
  std::string model, data, device = "auto";
  int threads = 0;
  int64_t batch_size = 512, seq_len = 0;
  double val_fraction = 0;
  bool json = false;
};

nlohmann::json result_json(const EvalResult& r) {
  nlohmann::json j = {{"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}};
  if (r.per_token) j["perplexity"] = std::exp(r.loss);
  return j;
}

void print_result(const char* split, const EvalResult& r) {
  std::cout << "  " << split << " accuracy  " << format_fixed(100.0 * r.accuracy, 2) << " %"
            << (r.per_token ? " of next tokens" : "") << " (" << r.samples << " samples)\n"
            << "  " << split << " loss      " << format_fixed(r.loss, 4)
            << (r.per_token ? " per token, perplexity " + format_fixed(std::exp(r.loss), 2) : "")
            << "\n";
}

}  // namespace

int run_eval(const std::vector<std::string>& args) {
  EvalFlags f;
  CLI::App app{"Evaluate a saved model (train --save-model FILE.safetensors) on a data set.",
               "saturate eval"};
  app.add_option("--model", f.model, "the saved model, FILE.safetensors")->required();
  app.add_option("--data", f.data, "the data set (default: the one it was trained on)");
  app.add_option("--device", f.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", f.threads, "intra-op threads (0: one per usable core)");
  app.add_option("--batch-size", f.batch_size, "samples per evaluation batch")->capture_default_str();
  app.add_option("--seq-len", f.seq_len,
                 "text data: tokens per window (default: the length it was trained on)");
  app.add_option("--val-fraction", f.val_fraction,
                 "also evaluate the held-out tail of the training split, as train held it out");
  app.add_flag("--json", f.json, "print the results as JSON");
  if (!parse_args(app, args)) return 0;
  SATURATE_CHECK(is_saved_model_path(f.model), "eval: --model ", f.model,
                 " is not a saved model (FILE.safetensors from train --save-model)");
  const SavedModelInfo info = read_saved_model_info(f.model);
  RecipeFlags rf;
  rf.model = f.model;
  rf.data = f.data.empty() ? info.data : f.data;
  rf.device = f.device;
  rf.threads = f.threads;
  // A language model is scored on windows of the length it was trained on unless told.
  rf.seq_len = f.seq_len > 0 || !info.tokens || info.sample_shape.empty() ? f.seq_len
                                                                          : info.sample_shape[0];
  rf.val_fraction = f.val_fraction;
  rf.train.eval_batch_size = f.batch_size;
  const Recipe recipe = resolve_recipe(rf, "eval");
  TrainingInput input = open_recipe_input(recipe, recipe.device);
  auto model = make_model(rf.model, model_inputs_for(input));
  Trainer trainer(*model, recipe.train, recipe.device);
  if (!info.tokens && (std::abs(info.normalize_mean - input.splits.normalize_mean) > 1e-9 ||
                       std::abs(info.normalize_std - input.splits.normalize_std) > 1e-9))
    SATURATE_LOG_INFO("eval: inputs normalised as in training (mean ", info.normalize_mean,
                      ", std ", info.normalize_std, "), not with this data's own statistics");
  SATURATE_CHECK(input.splits.test.size() > 0 || input.splits.validation.size() > 0, "eval: ",
                 rf.data, " has no test split; --val-fraction holds out part of its training data");
  nlohmann::json out = {{"model", info.model}, {"file", f.model}, {"data", rf.data},
                        {"steps_trained", info.steps}};
  std::optional<EvalResult> test, val;
  if (input.splits.test.size() > 0)
    test = trainer.evaluate(input.splits.test, info.normalize_mean, info.normalize_std);
  if (test) out["test"] = result_json(*test);
  if (input.splits.validation.size() > 0)
    val = trainer.evaluate(input.splits.validation, info.normalize_mean, info.normalize_std);
  if (val) out["validation"] = result_json(*val);
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "saturate eval: " << info.model << " (" << f.model << ", " << info.steps
            << " steps) on " << rf.data << ", " << recipe.device.str() << "\n";
  if (test) print_result("test", *test);
  if (val) print_result("val", *val);
  return 0;
}

}  // namespace saturate::cli
