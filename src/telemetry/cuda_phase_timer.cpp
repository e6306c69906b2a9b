// SPDX-License-Identifier: Apache-2.0
// CUDA-event phase timer (built only when LibTorch has CUDA). Each mark records a timing event
// on the device's current stream; the host never waits at a mark. A finished step's times are
// read once its last event has completed (cudaEventQuery through ready()), so a training loop
// that reads only ready steps keeps the stream busy.
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include "saturate/core/error.h"
#include "saturate/telemetry/phase_timer.h"
#include "telemetry/phase_times.h"

namespace saturate {
namespace {

using Event = std::unique_ptr<at::cuda::CUDAEvent>;

class CudaPhaseTimer final : public PhaseTimer {
 public:
  explicit CudaPhaseTimer(int index) : index_(static_cast<c10::DeviceIndex>(index)) {}

  void begin() override {
    SATURATE_ASSERT(!is_open_, "PhaseTimer::begin() inside an open step");
    is_open_ = true;
    current_ = Step{};
    current_.start = record();
  }

  void mark(Phase phase) override {
    SATURATE_ASSERT(is_open_, "PhaseTimer::mark() outside a step");
    current_.marks.emplace_back(phase, record());
  }

  int64_t finish() override {
    SATURATE_ASSERT(is_open_, "PhaseTimer::finish() outside a step");
    is_open_ = false;
    current_.end = record();
    steps_.emplace(next_ticket_, std::move(current_));
    return next_ticket_++;
  }

  bool ready(int64_t ticket) override {
    auto it = steps_.find(ticket);
    SATURATE_ASSERT(it != steps_.end(), "PhaseTimer::ready() of an unknown ticket ", ticket);
    return it->second.end->query();
  }

  void read(int64_t ticket, StepRecord& record) override {
    auto it = steps_.find(ticket);
    SATURATE_ASSERT(it != steps_.end(), "PhaseTimer::read() of an unknown ticket ", ticket);
    Step& s = it->second;
    s.end->synchronize();  // no wait when ready() said so
    detail::PhaseTimes times;
    const at::cuda::CUDAEvent* previous = s.start.get();
    for (auto& [phase, event] : s.marks) {
      times.ms[static_cast<size_t>(phase)] += previous->elapsed_time(*event);
      previous = event.get();
    }
    times.step_ms = s.start->elapsed_time(*s.end);
    times.apply(record);
    recycle(std::move(s.start));
    recycle(std::move(s.end));
    for (auto& m : s.marks) recycle(std::move(m.second));
    steps_.erase(it);
  }

  std::string clock_name() const override { return "cuda_events"; }

 private:
  struct Step {
    Event start, end;
    std::vector<std::pair<Phase, Event>> marks;
  };

  Event record() {
    Event e;
    if (pool_.empty()) {
      e = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);  // timing enabled
    } else {
      e = std::move(pool_.back());
      pool_.pop_back();
    }
    e->record(c10::cuda::getCurrentCUDAStream(index_));
    return e;
  }

  void recycle(Event e) { pool_.push_back(std::move(e)); }

  c10::DeviceIndex index_;
  bool is_open_ = false;
  Step current_;
  std::map<int64_t, Step> steps_;
  std::vector<Event> pool_;
  int64_t next_ticket_ = 0;
};

}  // namespace

std::unique_ptr<PhaseTimer> make_cuda_phase_timer(int index) {
  SATURATE_CHECK(index >= 0, "telemetry: CUDA device index must be >= 0, got ", index);
  return std::make_unique<CudaPhaseTimer>(index);
}

}  // namespace saturate
