// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {

double phase_sum_ms(const StepRecord& r) {
  return r.data_wait_ms + r.host_to_device_ms + r.forward_ms + r.backward_ms + r.optimizer_ms +
         r.communication_ms + r.other_ms;
}

PhaseBreakdown mean_phases(const std::vector<StepRecord>& records, size_t first) {
  PhaseBreakdown p;
  if (first >= records.size()) first = 0;
  const size_t n = records.size() - first;
  if (n == 0) return p;
  for (size_t i = first; i < records.size(); ++i) {
    const StepRecord& r = records[i];
    p.data_wait_ms += r.data_wait_ms;
    p.host_to_device_ms += r.host_to_device_ms;
    p.forward_ms += r.forward_ms;
    p.backward_ms += r.backward_ms;
    p.optimizer_ms += r.optimizer_ms;
    p.communication_ms += r.communication_ms;
    p.other_ms += r.other_ms;
    p.step_ms += r.step_ms;
  }
  for (double* f : {&p.data_wait_ms, &p.host_to_device_ms, &p.forward_ms, &p.backward_ms,
                    &p.optimizer_ms, &p.communication_ms, &p.other_ms, &p.step_ms})
    *f /= static_cast<double>(n);
  return p;
}

double mean_page_faults(const std::vector<StepRecord>& records, size_t first) {
  double sum = 0;
  int64_t counted = 0;
  for (size_t i = first; i < records.size(); ++i) {
    if (records[i].page_faults < 0) continue;
    sum += static_cast<double>(records[i].page_faults);
    ++counted;
  }
  return counted > 0 ? sum / static_cast<double>(counted) : -1.0;
}

void MultiSink::add(TelemetrySink* sink) {
  if (sink) sinks_.push_back(sink);
}
void MultiSink::on_begin(int64_t total_steps) {
  for (auto* s : sinks_) s->on_begin(total_steps);
}
void MultiSink::on_step(const StepRecord& record) {
  for (auto* s : sinks_) s->on_step(record);
}
void MultiSink::on_eval(int64_t step, const std::string& metric, double value) {
  for (auto* s : sinks_) s->on_eval(step, metric, value);
}
void MultiSink::on_device_sample(int64_t step, const DeviceSample& sample) {
  for (TelemetrySink* s : sinks_) s->on_device_sample(step, sample);
}

void MultiSink::on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                                const std::string& why) {
  for (auto* s : sinks_) s->on_batch_change(step, batch, lr_multiplier, why);
}

void MultiSink::on_checkpoint(int64_t steps_done) {
  for (auto* s : sinks_) s->on_checkpoint(steps_done);
}

void MultiSink::on_end() {
  for (auto* s : sinks_) s->on_end();
}

}  // namespace saturate
