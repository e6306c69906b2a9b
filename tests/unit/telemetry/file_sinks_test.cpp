// SPDX-License-Identifier: Apache-2.0
// The TensorBoard file is decoded here by a reader written independently of the writer: a
// bit-by-bit CRC-32C, and a protobuf wire-format walker that knows only field numbers.
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "saturate/core/error.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/tensorboard_writer.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

uint32_t bitwise_crc32c(const std::string& bytes) {
  uint32_t crc = ~0u;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t bitwise_masked(const std::string& bytes) {
  const uint32_t c = bitwise_crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

template <typename T>
T read_le(const std::string& s, size_t pos) {
  T v;
  std::memcpy(&v, s.data() + pos, sizeof(T));
  return v;
}

uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(pos++));
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

// Field number → raw value bytes (varints re-encoded as decimal strings) of one message.
std::multimap<int, std::string> fields(const std::string& msg) {
  std::multimap<int, std::string> out;
  size_t pos = 0;
  while (pos < msg.size()) {
    const uint64_t key = read_varint(msg, pos);
    const int field = static_cast<int>(key >> 3);
    switch (key & 7) {
      case 0: out.emplace(field, std::to_string(read_varint(msg, pos))); break;
      case 1: out.emplace(field, msg.substr(pos, 8)); pos += 8; break;
      case 5: out.emplace(field, msg.substr(pos, 4)); pos += 4; break;
      case 2: {
        const uint64_t n = read_varint(msg, pos);
        out.emplace(field, msg.substr(pos, n));
        pos += n;
        break;
      }
      default: ADD_FAILURE() << "unexpected wire type " << (key & 7); return out;
    }
  }
  return out;
}

std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < data.size()) {
    EXPECT_LE(pos + 12, data.size()) << "truncated header";
    const uint64_t len = read_le<uint64_t>(data, pos);
    EXPECT_EQ(read_le<uint32_t>(data, pos + 8), bitwise_masked(data.substr(pos, 8)))
        << "length CRC of record " << records.size();
    const std::string payload = data.substr(pos + 12, len);
    EXPECT_EQ(read_le<uint32_t>(data, pos + 12 + len), bitwise_masked(payload))
        << "data CRC of record " << records.size();
    records.push_back(payload);
    pos += 12 + len + 4;
  }
  EXPECT_EQ(pos, data.size());
  return records;
}

}  // namespace

TEST(Crc32c, MatchesTheStandardCheckValueAndAnIndependentImplementation) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const std::string s = "saturate writes TensorBoard files";
  EXPECT_EQ(crc32c(s.data(), s.size()), bitwise_crc32c(s));
  EXPECT_EQ(masked_crc32c(s.data(), s.size()), bitwise_masked(s));
}

TEST(TensorBoardWriter, FramesRecordsThatAnIndependentReaderDecodes) {
  testing::TempDir dir;
  std::string path;
  {
    TensorBoardWriter tb(dir.path());
    path = tb.path();
    tb.add_scalar("train/loss", 0.5, 3, 1000.25);
    tb.add_scalar("eval/test_accuracy", 0.875, 7, 1001.5);
    EXPECT_TRUE(tb.is_ok());
  }
  EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
  const auto records = read_records(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(fields(records[0]).find(3)->second, "brain.Event:2");  // file_version

  const auto e1 = fields(records[1]);
  EXPECT_EQ(read_le<double>(e1.find(1)->second, 0), 1000.25);  // wall_time
  EXPECT_EQ(e1.find(2)->second, "3");                           // step
  const auto value = fields(fields(e1.find(5)->second).find(1)->second);  // summary.value
  EXPECT_EQ(value.find(1)->second, "train/loss");
  EXPECT_EQ(read_le<float>(value.find(2)->second, 0), 0.5f);  // simple_value

  const auto e2 = fields(records[2]);
  EXPECT_EQ(e2.find(2)->second, "7");
  const auto v2 = fields(fields(e2.find(5)->second).find(1)->second);
  EXPECT_EQ(v2.find(1)->second, "eval/test_accuracy");
  EXPECT_EQ(read_le<float>(v2.find(2)->second, 0), 0.875f);
}

TEST(TensorBoardWriter, UnwritableLogdirIsAnErrorNamingIt) {
  try {
    TensorBoardWriter tb("/proc/saturate-cannot-be-here");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/saturate-cannot-be-here"), std::string::npos);
  }
}

TEST(TensorBoardSink, WritesStepAndEvalScalars) {
  testing::TempDir dir;
  std::string path;
  {
    TensorBoardSink sink(dir.path());
    path = sink.writer().path();
    StepRecord r;
    r.step = 1;
    r.samples = 64;
    r.step_ms = 10;
    r.loss = 2.0;
    sink.on_step(r);
    sink.on_eval(1, "test_accuracy", 0.9);
    sink.on_end();
  }
  std::vector<std::string> tags;
  for (const auto& rec : read_records(path)) {
    const auto e = fields(rec);
    if (e.count(5)) tags.push_back(fields(fields(e.find(5)->second).find(1)->second).find(1)->second);
  }
  EXPECT_NE(std::find(tags.begin(), tags.end(), "train/loss"), tags.end());
  EXPECT_NE(std::find(tags.begin(), tags.end(), "train/samples_per_s"), tags.end());
  EXPECT_NE(std::find(tags.begin(), tags.end(), "time/forward_ms"), tags.end());
  EXPECT_NE(std::find(tags.begin(), tags.end(), "eval/test_accuracy"), tags.end());
}

TEST(JsonlSink, WritesOneParsableObjectPerStepAndEval) {
  testing::TempDir dir;
  {
    JsonlSink sink(dir.file("steps.jsonl"));
    StepRecord r;
    r.step = 4;
    r.loss = 1.25;
    r.forward_ms = 2.5;
    sink.on_step(r);
    sink.on_eval(4, "test_loss", 0.5);
    sink.on_end();
  }
  std::ifstream in(dir.file("steps.jsonl"));
  std::string a, b, c;
  std::getline(in, a);
  std::getline(in, b);
  EXPECT_FALSE(std::getline(in, c));
  const auto ja = nlohmann::json::parse(a), jb = nlohmann::json::parse(b);
  EXPECT_EQ(ja["type"], "step");
  EXPECT_EQ(ja["step"], 4);
  EXPECT_EQ(ja["forward_ms"], 2.5);
  EXPECT_EQ(jb["type"], "eval");
  EXPECT_EQ(jb["metric"], "test_loss");
  EXPECT_THROW(JsonlSink("/proc/no-such-dir/x.jsonl"), Error);
}

TEST(TraceSink, WritesWellFormedCompleteEventsOnePerPhasePerStep) {
  testing::TempDir dir;
  TraceSink sink(dir.file("trace.json"));
  for (int i = 0; i < 3; ++i) {
    StepRecord r;
    r.step = i;
    r.data_wait_ms = 1;
    r.forward_ms = 2;
    r.backward_ms = 3;
    r.optimizer_ms = 0.5;
    r.step_ms = 6.5;
    sink.on_step(r);
  }
  sink.on_end();
  std::ifstream in(dir.file("trace.json"));
  const auto doc = nlohmann::json::parse(in);
  ASSERT_TRUE(doc["traceEvents"].is_array());
  int steps = 0, phases = 0;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid") && e.contains("tid"));
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    (e["cat"] == "step" ? steps : phases)++;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(phases, 3 * 4);
  EXPECT_THROW(TraceSink("/proc/no-such-dir/t.json"), Error);
}

TEST(TraceSink, Issue19_AStepsInterleavedPhasesAreDrawnWhereTheyRan) {
  testing::TempDir dir;
  TraceSink sink(dir.file("trace.json"));
  StepRecord r;
  r.forward_ms = 3;
  r.communication_ms = 4;
  r.step_ms = 7;
  r.spans = {{2, 0, 1}, {5, 1, 4}, {2, 5, 2}};  // forward, waiting, forward
  sink.on_step(r);
  sink.on_end();
  std::ifstream in(dir.file("trace.json"));
  const auto doc = nlohmann::json::parse(in);
  std::vector<std::pair<std::string, double>> drawn;
  double step_ts = -1;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "step") step_ts = e["ts"].get<double>();
    else drawn.emplace_back(e["name"].get<std::string>(), e["ts"].get<double>());
  }
  ASSERT_EQ(drawn.size(), 3u);
  EXPECT_EQ(drawn[0].first, "forward");
  EXPECT_EQ(drawn[1].first, "communication");
  EXPECT_EQ(drawn[2].first, "forward");
  EXPECT_NEAR(drawn[2].second - step_ts, 5000.0, 1e-6);
}

TEST(TraceSink, Issue15_RanksTracksMergeIntoOneTraceWithAProcessPerRank) {
  // Two ranks collect without a file; the merge keeps each rank's slices on its own track.
  std::vector<std::string> docs;
  for (int rank = 0; rank < 2; ++rank) {
    TraceSink sink("", rank, "rank " + std::to_string(rank));
    StepRecord r;
    r.forward_ms = 1 + rank;
    r.step_ms = 1 + rank;
    sink.on_step(r);
    sink.on_end();  // writes nothing
    docs.push_back(sink.json());
  }
  const auto doc = nlohmann::json::parse(merge_traces(docs));
  std::map<int, std::string> names;
  std::map<int, double> forward_us;
  for (const auto& e : doc["traceEvents"]) {
    if (e["name"] == "process_name") names[e["pid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "forward") forward_us[e["pid"].get<int>()] = e["dur"].get<double>();
  }
  EXPECT_EQ(names, (std::map<int, std::string>{{1, "rank 0"}, {2, "rank 1"}}));
  EXPECT_EQ(forward_us, (std::map<int, double>{{1, 1000.0}, {2, 2000.0}}));
  EXPECT_THROW(merge_traces({docs[0], "{\"steps\": []}"}), Error);
  EXPECT_THROW(merge_traces({"not json"}), Error);
}

}  // namespace saturate
