// SPDX-License-Identifier: Apache-2.0
// The parallel Loader: ordered and identical output whatever the worker count, epochs and shards
// that cover the data exactly, clean shutdown mid-epoch, worker errors surfaced at their batch,
// and the decoded-sample cache.
#include "saturate/data/loader.h"

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/trainer.h"
#include "testing/error_of.h"
#include "testing/pattern_dataset.h"

namespace saturate {
namespace {

// Sample i: every pixel is i % 251, the label is i; optionally slow, optionally failing at one
// index.
class IndexSource : public SampleSource {
 public:
  explicit IndexSource(int64_t n, int64_t fail_at = -1, int slow_us = 0)
      : n_(n), fail_at_(fail_at), slow_us_(slow_us) {}
  int64_t size() const override { return n_; }
  std::vector<int64_t> sample_shape() const override { return {1, 4, 4}; }
  int64_t num_classes() const override { return n_; }
  int64_t read(int64_t index, uint8_t* out) const override {
    if (index == fail_at_) throw std::runtime_error("corrupt record");
    if (slow_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow_us_));
    std::fill(out, out + 16, static_cast<uint8_t>(index % 251));
    reads.fetch_add(1);
    return index;
  }
  std::string describe() const override { return "index-source.bin"; }
  mutable std::atomic<int64_t> reads{0};

 private:
  int64_t n_, fail_at_;
  int slow_us_;
};

std::vector<std::pair<at::Tensor, at::Tensor>> epoch(Loader& loader, int64_t e) {
  loader.start_epoch(e);
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  while (auto b = loader.next()) out.emplace_back(b->inputs.clone(), b->targets.clone());
  return out;
}

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace

TEST(Loader, Issue6_ZeroAndManyWorkersGiveIdenticalBatchesInOrder) {
  const auto source = make_synthetic_source("synthetic:3,12,12,10,300");
  LoaderOptions o;
  o.batch_size = 32;
  o.seed = 7;
  o.transform.crop = 10;
  o.transform.pad = 2;
  o.transform.flip = true;
  o.transform.mean = 0.5;
  o.transform.std = 0.25;
  Loader serial(*source, o);
  o.workers = 4;
  o.prefetch = 3;
  Loader parallel(*source, o);
  EXPECT_EQ(parallel.output_shape(), (std::vector<int64_t>{3, 10, 10}));
  for (int64_t e = 0; e < 3; ++e) {
    SCOPED_TRACE(e);
    const auto a = epoch(serial, e), b = epoch(parallel, e);
    ASSERT_EQ(a.size(), 10u);  // 300 / 32 rounded up
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i].first, b[i].first)) << "batch " << i;
      EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << "batch " << i;
    }
  }
  // Another epoch is another order and other crops.
  EXPECT_FALSE(torch::equal(epoch(serial, 0)[0].second, epoch(serial, 1)[0].second));
}

TEST(Loader, Issue6_EveryEpochVisitsEachSampleOnce) {
  IndexSource source(103);
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 3;
  Loader loader(source, o);
  EXPECT_EQ(loader.batches_per_epoch(), 11);
  for (int64_t e = 0; e < 2; ++e) {
    std::multiset<int64_t> seen;
    for (const auto& [x, y] : epoch(loader, e)) {
      for (int64_t i = 0; i < y.size(0); ++i) {
        const int64_t label = y[i].item<int64_t>();
        seen.insert(label);
        // The pixels belong to the same sample as the label.
        EXPECT_NEAR(x[i][0][0][0].item<float>(), static_cast<float>(label % 251) / 255.0f, 1e-6);
      }
    }
    ASSERT_EQ(seen.size(), 103u);
    for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }
  // drop_last keeps whole batches only.
  o.drop_last = true;
  Loader dropping(source, o);
  EXPECT_EQ(dropping.batches_per_epoch(), 10);
  EXPECT_EQ(epoch(dropping, 0).back().second.size(0), 10);
}

TEST(Loader, Issue6_ShardsCoverTheDatasetWithoutOverlap) {
  IndexSource source(100);
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions o;
    o.batch_size = 8;
    o.rank = rank;
    o.world = 3;
    o.workers = 2;
    o.seed = 11;  // every rank shuffles alike, then takes its stride
    Loader loader(source, o);
    // Issue 15: equal shards (34 each, the order wrapping for 2 samples), so every rank takes
    // the same number of steps and none waits for another in the all-reduce.
    EXPECT_EQ(loader.samples_per_epoch(), 34);
    EXPECT_EQ(loader.batches_per_epoch(), 5);
    for (const auto& [x, y] : epoch(loader, 0))
      for (int64_t i = 0; i < y.size(0); ++i) seen.insert(y[i].item<int64_t>());
  }
  ASSERT_EQ(seen.size(), 102u);
  int twice = 0;
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_GE(seen.count(i), 1u) << i;  // the union is the dataset
    twice += seen.count(i) == 2 ? 1 : 0;
  }
  EXPECT_EQ(twice, 2);
}

TEST(Loader, Issue6_ShutdownMidEpochJoinsEveryWorkerPromptly) {
  const int before = thread_count();
  IndexSource source(10000, -1, /*slow_us=*/500);
  {
    LoaderOptions o;
    o.batch_size = 64;
    o.workers = 4;
    Loader loader(source, o);
    EXPECT_EQ(thread_count(), before + 4);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    const auto t0 = std::chrono::steady_clock::now();
    loader.start_epoch(1);  // abandons the batches in flight
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    ASSERT_TRUE(loader.next().has_value());
  }  // destroyed mid-epoch
  EXPECT_EQ(thread_count(), before);
  // Far fewer reads than the epoch's 10000: workers stopped when told.
  EXPECT_LT(source.reads.load(), 2000);
}

TEST(Loader, Issue6_AWorkersErrorSurfacesAtItsBatchNamingTheSampleAndSource) {
  IndexSource source(200, /*fail_at=*/137);
  for (int workers : {0, 3}) {
    SCOPED_TRACE(workers);
    LoaderOptions o;
    o.batch_size = 16;
    o.shuffle = false;
    o.workers = workers;
    Loader loader(source, o);
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(loader.next().has_value()) << "batch " << i;
    const std::string e = testing::error_of([&] { loader.next(); });  // batch 8 holds 137
    EXPECT_NE(e.find("sample 137"), std::string::npos) << e;
    EXPECT_NE(e.find("index-source.bin"), std::string::npos) << e;
    EXPECT_NE(e.find("corrupt record"), std::string::npos) << e;
  }
}

TEST(Loader, StartingTheCurrentEpochAgainKeepsItsPrefetchedBatches) {
  IndexSource source(120);
  LoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  o.prefetch = 2;
  o.shuffle = false;
  Loader loader(source, o);  // starts epoch 0: the workers make two batches ahead
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (source.reads.load() < 32 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(source.reads.load(), 32);
  const auto batches = epoch(loader, 0);  // as a trainer does: start_epoch(0), then next()…
  ASSERT_EQ(batches.size(), 8u);
  EXPECT_EQ(source.reads.load(), 120) << "the prefetched batches were made again";
  EXPECT_EQ(batches[1].second[0].item<int64_t>(), 16);
  EXPECT_EQ(loader.stats().samples, 120);
  // After taking a batch, starting the epoch again starts it over.
  loader.start_epoch(1);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(1);
  EXPECT_EQ(epoch(loader, 1).size(), 8u);
}

TEST(Loader, Issue6_CacheServesTheSecondEpochAndReportsItsHitRate) {
  IndexSource source(120);
  LoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  o.cache_bytes = 120 * 16;  // everything
  Loader loader(source, o);
  const auto first = epoch(loader, 0);
  EXPECT_EQ(source.reads.load(), 120);
  const auto second = epoch(loader, 1);
  EXPECT_EQ(source.reads.load(), 120) << "the second epoch reads no sample from the source";
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.samples, 240);
  EXPECT_EQ(s.cache_hits, 120);
  EXPECT_DOUBLE_EQ(s.cache_hit_rate(), 0.5);
  // A budget for half the samples caches half.
  IndexSource half_source(120);
  o.cache_bytes = 60 * 16;
  Loader half(half_source, o);
  epoch(half, 0);
  epoch(half, 1);
  EXPECT_EQ(half_source.reads.load(), 180);
}

TEST(Loader, ImpossibleOptionsNameTheOption) {
  IndexSource source(10);
  auto error_for = [&](auto change) {
    LoaderOptions o;
    change(o);
    return testing::error_of([&] { Loader l(source, o); });
  };
  EXPECT_NE(error_for([](LoaderOptions& o) { o.batch_size = 0; }).find("--batch-size"), std::string::npos);
  EXPECT_NE(error_for([](LoaderOptions& o) { o.workers = -1; }).find("--workers"), std::string::npos);
  EXPECT_NE(error_for([](LoaderOptions& o) { o.prefetch = 0; }).find("--prefetch"), std::string::npos);
  EXPECT_NE(error_for([](LoaderOptions& o) { o.rank = 2; o.world = 2; }).find("rank"), std::string::npos);
  EXPECT_NE(error_for([](LoaderOptions& o) { o.transform.crop = 9; }).find("crop"), std::string::npos);
}

TEST(SyntheticSource, SpecIsCheckedFieldByField) {
  const auto s = make_synthetic_source("synthetic:3,32,32,10,1000,5");
  EXPECT_EQ(s->size(), 1000);
  EXPECT_EQ(s->sample_shape(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(s->num_classes(), 10);
  std::vector<uint8_t> a(3 * 32 * 32), b(3 * 32 * 32);
  EXPECT_EQ(s->read(13, a.data()), 3);
  s->read(13, b.data());
  EXPECT_EQ(a, b);
  s->read(14, b.data());
  EXPECT_NE(a, b);
  EXPECT_NE(testing::error_of([] { make_synthetic_source("synthetic:3,32,x,10,1000"); }).find("W"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make_synthetic_source("synthetic:3,32,32"); }).find("expected"),
            std::string::npos);
}

TEST(Loader, TrainerLearnsThroughTheLoaderAndItsWaitIsDataWait) {
  const auto data = testing::make_pattern_splits(512, 128);
  const auto source = make_sample_source(data.train);
  LoaderOptions o;
  o.batch_size = 32;
  o.workers = 2;
  o.transform.mean = data.normalize_mean;
  o.transform.std = data.normalize_std;
  Loader loader(*source, o);
  TrainOptions t;
  t.batch_size = 32;
  t.steps = 60;
  t.timing_warmup_steps = 2;
  seed_everything(0);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, t, c10::Device("cpu"));
  MemorySink sink;
  const TrainSummary s = trainer.fit(loader, data, &sink);
  EXPECT_GT(s.test_accuracy, 0.9);
  ASSERT_EQ(sink.records().size(), 60u);
  EXPECT_GE(loader.stats().samples, 60 * 32 - 32);
}

}  // namespace saturate
