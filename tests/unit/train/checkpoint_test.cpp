// SPDX-License-Identifier: Apache-2.0
// Issue 16: training checkpoints. A run stopped at any step and resumed from its checkpoint
// ends bit for bit where the uninterrupted run ends (and leaving out any part of the state
// shows up); a damaged newest checkpoint is passed over for the one before; a diverged run
// stops with its diagnosis and is never saved.
#include "saturate/train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/data/loader.h"
#include "saturate/data/sample_source.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/periodic_checkpoints.h"
#include "saturate/train/trainer.h"
#include "testing/error_of.h"
#include "testing/pattern_dataset.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

// POSIX, not std::filesystem: libtorch.so's copies of its symbols can be the ones called.
bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }
bool is_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }
void resize_file(const std::string& path, off_t size) { ASSERT_EQ(::truncate(path.c_str(), size), 0); }

// Keeps the state of the step it is asked to stop at (in memory) and optionally writes it.
class CaptureAt : public CheckpointHook {
 public:
  explicit CaptureAt(int64_t step, CheckpointStore* store = nullptr) : step_(step), store_(store) {}
  bool is_due(int64_t steps_done) override { return steps_done == step_; }
  std::string save(const TrainState& state) override {
    if (state.step != step_) return "";  // the end-of-run checkpoint
    captured = state;
    ++saves;
    return store_ ? store_->save(state, {{"note", "test"}}) : "memory";
  }
  TrainState captured;
  int saves = 0;

 private:
  int64_t step_;
  CheckpointStore* store_;
};

TrainOptions resume_options() {
  TrainOptions o;
  o.batch_size = 16;
  o.steps = 24;
  o.lr = 1e-3;
  o.seed = 7;
  o.warmup_steps = 4;
  o.evaluate = false;
  return o;
}

LoaderOptions loader_options(const TrainOptions& o) {
  LoaderOptions l;
  l.batch_size = o.batch_size;
  l.seed = o.seed;
  l.workers = 2;  // the order must not depend on the workers, resumed or not
  return l;
}

struct Finished {
  std::vector<at::Tensor> params;
  std::vector<StepRecord> records;
  TrainSummary summary;
};

std::vector<at::Tensor> copies(Model& m) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : m.state_tensors()) out.push_back(t.detach().clone());
  return out;
}

// mlp-deep has dropout, so the CPU generator is part of what must come back.
Finished train_from(const DatasetSplits& data, const SampleSource& source, const TrainOptions& o,
                    const TrainState* from, CheckpointHook* hook, uint64_t init_seed) {
  seed_everything(init_seed);  // a resumed process starts from other weights and generators
  auto model = make_model("mlp-deep", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cpu"));
  if (from) trainer.restore(*from);
  trainer.set_checkpoint_hook(hook);
  Loader loader(source, loader_options(o));
  Finished f;
  f.summary = trainer.fit(loader, data);
  f.params = copies(*model);
  f.records = trainer.capture().records;
  return f;
}

// Largest |a - b| over the tensors, or -1 when they are bitwise equal.
double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = -1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (torch::equal(a[i], b[i])) continue;
    worst = std::max(worst, (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>());
  }
  return worst;
}

TrainState small_state(int64_t step) {
  TrainState s;
  s.step = step;
  s.epoch = 1;
  s.batch_in_epoch = 3;
  s.model = {torch::arange(6, torch::kFloat32).reshape({2, 3}), torch::tensor({int64_t{5}})};
  s.optimizer = std::string("opt\0bytes", 9);
  s.scaler = {{"scale", 1024.0}};
  s.cpu_generator = at::detail::getDefaultCPUGenerator().get_state();
  for (int64_t i = 0; i < step; ++i) {
    StepRecord r;
    r.step = i;
    r.loss = 1.0 / static_cast<double>(i + 1);
    r.grad_norm = 0.5;
    r.samples = 16;
    r.peak_memory_bytes = 123456789;
    s.records.push_back(r);
  }
  s.segment_starts = {0};
  s.train_wall_s = 1.25;
  return s;
}

}  // namespace

TEST(Checkpoint, Issue16_ResumedRunEndsBitForBitWhereTheUninterruptedOneDoes) {
  const auto data = testing::make_pattern_splits(200, 64);
  const auto source = make_sample_source(data.train);
  const TrainOptions o = resume_options();
  testing::TempDir dir;
  CheckpointStore store(dir.path());
  // Step 17 is mid-epoch (13 batches an epoch) in the second epoch.
  CaptureAt at17(17, &store);
  const Finished whole = train_from(data, *source, o, nullptr, &at17, o.seed);
  ASSERT_EQ(at17.saves, 1);
  // Through the disk, as another process would read it.
  const std::optional<LoadedCheckpoint> loaded = store.load_newest();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state.step, 17);
  EXPECT_TRUE(loaded->rejected.empty());
  EXPECT_EQ(loaded->info["note"], "test");

  const Finished resumed = train_from(data, *source, o, &loaded->state, nullptr, /*init_seed=*/99);
  EXPECT_EQ(max_diff(whole.params, resumed.params), -1.0) << "resumed weights differ";
  ASSERT_EQ(resumed.records.size(), whole.records.size());
  for (size_t i = 0; i < whole.records.size(); ++i)
    EXPECT_EQ(resumed.records[i].loss, whole.records[i].loss) << "step " << i;
  EXPECT_EQ(resumed.summary.resumed_from_step, 17);
  EXPECT_EQ(resumed.summary.steps, 24);

  // Each part of the state matters: leave one out and the run ends elsewhere.
  auto without = [&](auto&& drop) {
    TrainState s = loaded->state;
    drop(s);
    return max_diff(whole.params, train_from(data, *source, o, &s, nullptr, 99).params);
  };
  EXPECT_GT(without([](TrainState& s) { s.optimizer.clear(); }), 0) << "optimizer state";
  EXPECT_GT(without([](TrainState& s) { s.cpu_generator = at::Tensor(); }), 0) << "dropout draws";
  EXPECT_GT(without([](TrainState& s) { s.batch_in_epoch = 0; }), 0) << "loader position";
}

TEST(Checkpoint, Issue16_SavesAndReadsBackEveryField) {
  testing::TempDir dir;
  CheckpointStore store(dir.path());
  const TrainState s = small_state(5);
  const std::string where = store.save(s, {{"model", "mlp"}});
  EXPECT_EQ(base_name(where), "step-00000005");
  const LoadedCheckpoint c = CheckpointStore::load(where);
  EXPECT_EQ(c.state.step, 5);
  EXPECT_EQ(c.state.epoch, 1);
  EXPECT_EQ(c.state.batch_in_epoch, 3);
  ASSERT_EQ(c.state.model.size(), 2u);
  EXPECT_TRUE(torch::equal(c.state.model[0], s.model[0]));
  EXPECT_TRUE(torch::equal(c.state.model[1], s.model[1]));
  EXPECT_EQ(c.state.optimizer, s.optimizer);
  EXPECT_EQ(c.state.scaler, s.scaler);
  EXPECT_TRUE(torch::equal(c.state.cpu_generator, s.cpu_generator));
  ASSERT_EQ(c.state.records.size(), 5u);
  EXPECT_EQ(c.state.records[4].loss, 0.2);
  EXPECT_EQ(c.state.records[4].peak_memory_bytes, 123456789);
  EXPECT_EQ(c.state.segment_starts, std::vector<int64_t>{0});
  EXPECT_EQ(c.state.train_wall_s, 1.25);
  EXPECT_EQ(c.info["model"], "mlp");
}

TEST(Checkpoint, Issue16_KeepsTheNewestAndClearsWhatACrashLeft) {
  testing::TempDir dir;
  // A crash in the middle of a save leaves a .tmp folder: never loaded, removed next time.
  ASSERT_EQ(::mkdir(dir.file(".tmp-step-00000009").c_str(), 0755), 0);
  std::ofstream(dir.file(".tmp-step-00000009/state.pt")) << "half";
  CheckpointStore store(dir.path(), /*keep=*/2);
  EXPECT_TRUE(exists(dir.file(".tmp-step-00000009"))) << "a reader removed a writer's file";
  store.open_for_writing();
  EXPECT_FALSE(exists(dir.file(".tmp-step-00000009")));
  for (int64_t step : {2, 4, 6}) store.save(small_state(step), {});
  const std::vector<std::string> kept = store.list();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(base_name(kept[0]), "step-00000004");
  EXPECT_EQ(base_name(kept[1]), "step-00000006");
  // Saving a step again (a resumed run checkpointing where it began) replaces it whole.
  store.save(small_state(6), {{"again", true}});
  EXPECT_EQ(CheckpointStore::load(kept[1]).info["again"], true);
}

TEST(Checkpoint, Issue16_ADamagedNewestIsPassedOverForThePreviousOne) {
  struct Damage {
    const char* what;
    std::function<void(const std::string&)> apply;
    const char* says;
  };
  const std::vector<Damage> damages = {
      {"truncated state", [](const std::string& d) { resize_file(d + "/state.pt", 100); },
       "truncated"},
      {"flipped bit",
       [](const std::string& d) {
         std::fstream f(d + "/state.pt", std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(200);
         char c = 0;
         f.read(&c, 1);
         c = static_cast<char>(c ^ 0x10);
         f.seekp(200);
         f.write(&c, 1);
       },
       "fails its checksum"},
      {"deleted manifest", [](const std::string& d) { ::unlink((d + "/MANIFEST.json").c_str()); },
       "missing"},
      {"deleted state", [](const std::string& d) { ::unlink((d + "/state.pt").c_str()); }, "missing"},
      {"edited meta",
       [](const std::string& d) { std::ofstream(d + "/meta.json", std::ios::app) << " "; },
       "changed since it was written"},
      {"garbage manifest",
       [](const std::string& d) { std::ofstream(d + "/MANIFEST.json") << "{\"schema"; },
       "not a checkpoint manifest"},
  };
  for (const Damage& damage : damages) {
    testing::TempDir dir;
    CheckpointStore store(dir.path());
    store.save(small_state(3), {});
    const std::string newest = store.save(small_state(4), {});
    damage.apply(newest);
    const std::optional<LoadedCheckpoint> c = store.load_newest();
    ASSERT_TRUE(c.has_value()) << damage.what;
    EXPECT_EQ(c->state.step, 3) << damage.what;
    ASSERT_EQ(c->rejected.size(), 1u) << damage.what;
    EXPECT_NE(c->rejected[0].find("step-00000004"), std::string::npos) << c->rejected[0];
    EXPECT_NE(c->rejected[0].find(damage.says), std::string::npos)
        << damage.what << ": " << c->rejected[0];
  }
}

TEST(Checkpoint, Issue16_NoIntactCheckpointIsOneLineNotAGarbageRun) {
  testing::TempDir dir;
  CheckpointStore store(dir.path());
  const std::string only = store.save(small_state(2), {});
  resize_file(only + "/state.pt", 10);
  const std::string e = testing::error_of([&] { store.load_newest(); });
  EXPECT_NE(e.find("no usable checkpoint in " + dir.path()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // An empty folder has nothing to resume: not an error.
  testing::TempDir empty;
  EXPECT_FALSE(CheckpointStore(empty.path()).load_newest().has_value());
  EXPECT_FALSE(CheckpointStore(empty.file("not-yet")).load_newest().has_value());
  // A file where the folder should be.
  std::ofstream(empty.file("plain")) << "x";
  CheckpointStore plain(empty.file("plain"));
  EXPECT_NE(testing::error_of([&] { plain.open_for_writing(); }).find("not a folder"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { plain.load_newest(); }).find("not a folder"), std::string::npos);
}

TEST(Checkpoint, Issue16_AnotherModelsStateIsRefusedNamingTheTensor) {
  const auto data = testing::make_pattern_splits(64, 16);
  auto mlp = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  auto cnn = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
  TrainOptions o = resume_options();
  Trainer a(*mlp, o, c10::Device("cpu"));
  Trainer b(*cnn, o, c10::Device("cpu"));
  const std::string e = testing::error_of([&] { b.restore(a.capture()); });
  EXPECT_NE(e.find("a different model"), std::string::npos) << e;
}

TEST(Checkpoint, Issue16_ANonFiniteLossStopsTheRunWithItsDiagnosisAndIsNeverSaved) {
  const auto data = testing::make_pattern_splits(128, 32);
  TrainOptions o;
  o.batch_size = 16;
  o.steps = 200;
  o.optimizer = OptimizerKind::kSgd;
  o.lr = 1e6;  // blows up within a few steps
  o.schedule = ScheduleKind::kConstant;
  o.warmup_steps = 0;
  o.evaluate = false;
  seed_everything(1);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cpu"));
  struct EveryStep : CheckpointHook {
    bool is_due(int64_t) override { return true; }
    std::string save(const TrainState& s) override {
      for (const StepRecord& r : s.records) EXPECT_TRUE(std::isfinite(r.loss)) << r.step;
      saved_steps.push_back(s.step);
      return "memory";
    }
    std::vector<int64_t> saved_steps;
  } hook;
  trainer.set_checkpoint_hook(&hook);
  const TrainSummary s = trainer.fit(data);
  ASSERT_TRUE(s.divergence.has_value());
  const Divergence& d = *s.divergence;
  EXPECT_LT(d.step, 20);
  EXPECT_LT(s.steps, 25) << "the run went on after diverging";
  EXPECT_NE(d.reason.find("the loss is"), std::string::npos) << d.reason;
  EXPECT_LT(d.last_finite_step, d.step);
  if (d.last_finite_step >= 0) {
    EXPECT_TRUE(std::isfinite(d.last_finite_loss));
  }
  EXPECT_FALSE(d.grad_norms.empty());
  EXPECT_EQ(d.lr, 1e6);
  EXPECT_TRUE(std::isnan(s.test_accuracy)) << "a diverged model is not evaluated";
  for (int64_t step : hook.saved_steps) EXPECT_LE(step, d.last_finite_step + 1);
}

TEST(Checkpoint, Issue16_LoaderSeekGivesTheBatchesAnUninterruptedEpochGives) {
  const auto data = testing::make_pattern_splits(100, 10);
  const auto source = make_sample_source(data.train);
  LoaderOptions lo;
  lo.batch_size = 8;
  lo.workers = 2;
  lo.seed = 3;
  Loader straight(*source, lo);
  straight.start_epoch(2);
  std::vector<at::Tensor> expected;
  while (auto b = straight.next()) expected.push_back(b->targets.clone());
  for (int64_t at : {0, 1, 5, 12, 13}) {
    Loader jumped(*source, lo);
    jumped.seek(2, at);
    for (int64_t k = at; k < static_cast<int64_t>(expected.size()); ++k) {
      auto b = jumped.next();
      ASSERT_TRUE(b.has_value()) << "seek " << at << " batch " << k;
      EXPECT_TRUE(torch::equal(b->targets, expected[static_cast<size_t>(k)])) << at << "/" << k;
    }
    EXPECT_FALSE(jumped.next().has_value()) << "seek " << at;
  }
  Loader bad(*source, lo);
  EXPECT_NE(testing::error_of([&] { bad.seek(0, 14); }).find("cannot seek"), std::string::npos);
}

TEST(Checkpoint, Issue16_AResumedJsonlLogKeepsTheStepsBeforeTheCheckpoint) {
  testing::TempDir dir;
  const std::string path = dir.file("steps.jsonl");
  {
    std::ofstream f(path);
    for (int step = 0; step < 8; ++step) f << "{\"type\":\"step\",\"step\":" << step << "}\n";
    f << "{\"type\":\"eval\",\"step\":5,\"metric\":\"val_loss\",\"value\":1}\n";
    f << "{\"type\":\"step\",\"st";  // the crash cut this line short
  }
  { JsonlSink sink(path, /*resume_step=*/5); }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[4], "{\"type\":\"step\",\"step\":4}");
  EXPECT_NE(lines[5].find("\"eval\""), std::string::npos);
}

TEST(Checkpoint, Issue16_PeriodicCheckpointsAreDueByStepsOrByTime) {
  testing::TempDir dir;
  double now = 0;
  CheckpointOptions o;
  o.dir = dir.file("ckpt");
  o.every_steps = 5;
  o.interval_s = 0;
  PeriodicCheckpoints by_steps(o, {}, /*is_writer=*/true, [&] { return now; });
  EXPECT_TRUE(is_folder(o.dir)) << "the writer's folder is made up front";
  EXPECT_FALSE(by_steps.is_due(4));
  EXPECT_TRUE(by_steps.is_due(5));
  EXPECT_TRUE(by_steps.is_due(10));
  o.every_steps = 0;
  o.interval_s = 600;
  PeriodicCheckpoints by_time(o, {}, true, [&] { return now; });
  now = 599;
  EXPECT_FALSE(by_time.is_due(1));
  now = 600;
  EXPECT_TRUE(by_time.is_due(2));
  by_time.saved(2);
  now = 900;
  EXPECT_FALSE(by_time.is_due(3)) << "the interval counts from the last checkpoint";
  now = 1200;
  EXPECT_TRUE(by_time.is_due(4));
  // A reader (rank > 0) never writes, and never creates the folder.
  CheckpointOptions r;
  r.dir = dir.file("elsewhere");
  PeriodicCheckpoints reader(r, {}, /*is_writer=*/false);
  EXPECT_EQ(reader.save(small_state(1)), "");
  EXPECT_FALSE(exists(r.dir));
}

TEST(Checkpoint, Issue16_ResumeRefusesAnotherRunAndWarnsOfChangedSettings) {
  const nlohmann::json mine = {{"model", "mlp"},      {"data", "fashion-mnist"},
                               {"train_samples", 60000}, {"world_size", 1},
                               {"batch_size", 64},    {"accumulate", 1},
                               {"optimizer", "adamw"}, {"precision", "fp32"},
                               {"seed", 0},           {"steps", 100},
                               {"lr", 0.001},         {"schedule", "cosine"}};
  EXPECT_TRUE(check_resume(mine, mine).refusal.empty());
  EXPECT_TRUE(check_resume(mine, mine).warnings.empty());
  for (const auto& [key, other] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"model", "fmnist-cnn"}, {"data", "mnist"}, {"world_size", 2}, {"batch_size", 32},
           {"optimizer", "sgd"}, {"precision", "fp16"}, {"train_samples", 54000}}) {
    nlohmann::json theirs = mine;
    theirs[key] = other;
    const std::string r = check_resume(theirs, mine).refusal;
    EXPECT_NE(r.find("its " + key + " is " + (other.is_string() ? other.get<std::string>() : other.dump())),
              std::string::npos)
        << r;
  }
  nlohmann::json longer = mine;
  longer["steps"] = 50;
  const ResumeCheck c = check_resume(longer, mine);
  EXPECT_TRUE(c.refusal.empty());
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0], "steps was 50 in the checkpoint's run, 100 now");
}

// Issue 34 (defect 8): a write that fails mid-run is the run's failure (exit 1), not bad input
// (exit 2). Here the folder is removed under the writer.
TEST(Checkpoint, Issue34_AFailedWriteIsARunFailureNotAUsageError) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  CheckpointStore store(ckpt);
  store.open_for_writing();
  ASSERT_EQ(::rmdir(ckpt.c_str()), 0);
  try {
    store.save(small_state(1), {});
    FAIL() << "saved into a removed folder";
  } catch (const RunFailure& e) {
    EXPECT_NE(std::string(e.what()).find(ckpt), std::string::npos) << e.what();
  }
}

}  // namespace saturate
