// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/tensorboard_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>

#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"

namespace saturate {
namespace {

// Table-driven CRC-32C, reflected polynomial 0x82F63B78.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 Linux are little-endian, as TFRecord
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string host_name() {
  char buf[256] = {0};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "localhost";
}

}  // namespace

std::string TensorBoardWriter::frame_record(const std::string& payload) {
  std::string out;
  const uint64_t length = payload.size();
  put_fixed(out, length);
  put_fixed(out, masked_crc32c(out.data(), 8));
  out += payload;
  put_fixed(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

std::string TensorBoardWriter::encode_scalar_event(const std::string& tag, float value,
                                                   int64_t step, double wall_time_s) {
  std::string v;  // Summary.Value: tag = 1 (bytes), simple_value = 2 (float)
  put_bytes_field(v, 1, tag);
  put_varint(v, (2 << 3) | 5);
  put_fixed(v, value);
  std::string summary;  // Summary: value = 1 (repeated message)
  put_bytes_field(summary, 1, v);
  std::string event;  // Event: wall_time = 1 (double), step = 2 (int64), summary = 5
  put_varint(event, (1 << 3) | 1);
  put_fixed(event, wall_time_s);
  put_varint(event, (2 << 3) | 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes_field(event, 5, summary);
  return event;
}

TensorBoardWriter::TensorBoardWriter(const std::string& logdir) {
  SATURATE_CHECK(!logdir.empty(), "telemetry: --logdir is empty");
  struct stat st {};
  if (stat(logdir.c_str(), &st) != 0) {
    make_folders(logdir, "telemetry: --logdir");
  } else {
    SATURATE_CHECK(S_ISDIR(st.st_mode), "telemetry: --logdir '", logdir, "' is not a folder");
  }
  const double t = now_s();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010lld", static_cast<long long>(t));
  path_ = logdir + "/events.out.tfevents." + stamp + "." + host_name() + "." +
          std::to_string(getpid()) + ".saturate";
  file_ = std::fopen(path_.c_str(), "wb");
  SATURATE_CHECK(file_ != nullptr, "telemetry: cannot write in --logdir '", logdir, "': ",
                 std::strerror(errno));
  std::string event;  // Event{wall_time, file_version = 3: "brain.Event:2"}
  put_varint(event, (1 << 3) | 1);
  put_fixed(event, t);
  put_bytes_field(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const std::string record = frame_record(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) ok_ = false;
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step,
                                   double wall_time_s) {
  write_record(encode_scalar_event(tag, static_cast<float>(value), step,
                                   wall_time_s < 0 ? now_s() : wall_time_s));
}

void TensorBoardWriter::add_session_start(int64_t step) {
  std::string log;  // SessionLog: status = 1 (enum), START = 1
  put_varint(log, (1 << 3) | 0);
  put_varint(log, 1);
  std::string event;  // Event: wall_time = 1, step = 2, session_log = 6
  put_varint(event, (1 << 3) | 1);
  put_fixed(event, now_s());
  put_varint(event, (2 << 3) | 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes_field(event, 6, log);
  write_record(event);
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0) ok_ = false;
}

void TensorBoardSink::on_step(const StepRecord& r) {
  const double t = now_s();
  writer_.add_scalar("train/loss", r.loss, r.step, t);
  writer_.add_scalar("train/lr", r.lr, r.step, t);
  if (r.grad_norm >= 0) writer_.add_scalar("train/grad_norm", r.grad_norm, r.step, t);
  if (std::isfinite(r.gns)) writer_.add_scalar("train/gns", r.gns, r.step, t);
  if (std::isfinite(r.gns_precond))
    writer_.add_scalar("train/gns_precond", r.gns_precond, r.step, t);
  writer_.add_scalar("train/step_ms", r.step_ms, r.step, t);
  if (r.step_ms > 0)
    writer_.add_scalar("train/samples_per_s", r.samples / (r.step_ms / 1000.0), r.step, t);
  if (r.step_ms > 0 && r.tokens > 0)
    writer_.add_scalar("train/tokens_per_s", r.tokens / (r.step_ms / 1000.0), r.step, t);
  writer_.add_scalar("time/data_wait_ms", r.data_wait_ms, r.step, t);
  writer_.add_scalar("time/host_to_device_ms", r.host_to_device_ms, r.step, t);
  writer_.add_scalar("time/forward_ms", r.forward_ms, r.step, t);
  writer_.add_scalar("time/backward_ms", r.backward_ms, r.step, t);
  writer_.add_scalar("time/optimizer_ms", r.optimizer_ms, r.step, t);
  if (r.loss_scale != 1.0) writer_.add_scalar("train/loss_scale", r.loss_scale, r.step, t);
  if (r.peak_memory_bytes > 0)
    writer_.add_scalar("memory/peak_memory_bytes", static_cast<double>(r.peak_memory_bytes), r.step, t);
}

void TensorBoardSink::on_device_sample(int64_t step, const DeviceSample& s) {
  const int64_t at = std::max<int64_t>(step, 0);
  writer_.add_scalar("host/cpu_util_pct", s.cpu.util_pct, at);
  writer_.add_scalar("host/rss_mib", static_cast<double>(s.cpu.process_rss_bytes) / (1 << 20), at);
  for (const GpuSample& g : s.gpus) {
    const std::string p = "gpu" + std::to_string(g.index) + "/";
    if (g.util_pct >= 0) writer_.add_scalar(p + "util_pct", g.util_pct, at);
    if (g.mem_used_bytes >= 0)
      writer_.add_scalar(p + "mem_used_mib", static_cast<double>(g.mem_used_bytes) / (1 << 20), at);
    if (g.temperature_c >= 0) writer_.add_scalar(p + "temperature_c", g.temperature_c, at);
    if (g.power_w >= 0) writer_.add_scalar(p + "power_w", g.power_w, at);
    if (g.sm_clock_mhz >= 0) writer_.add_scalar(p + "sm_clock_mhz", g.sm_clock_mhz, at);
  }
}

void TensorBoardSink::on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                                      const std::string&) {
  writer_.add_scalar("train/batch_size", static_cast<double>(batch), step);
  writer_.add_scalar("train/lr_multiplier", lr_multiplier, step);
}

void TensorBoardSink::on_eval(int64_t step, const std::string& metric, double value) {
  writer_.add_scalar("eval/" + metric, value, step);
  writer_.flush();
}

}  // namespace saturate
