// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/phase_timer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>

#include "saturate/core/error.h"
#include "telemetry/phase_times.h"

namespace saturate {

void detail::PhaseTimes::apply(StepRecord& r) const {
  r.data_wait_ms = ms[static_cast<size_t>(Phase::kDataWait)];
  r.host_to_device_ms = ms[static_cast<size_t>(Phase::kHostToDevice)];
  r.forward_ms = ms[static_cast<size_t>(Phase::kForward)];
  r.backward_ms = ms[static_cast<size_t>(Phase::kBackward)];
  r.optimizer_ms = ms[static_cast<size_t>(Phase::kOptimizer)];
  r.communication_ms = ms[static_cast<size_t>(Phase::kCommunication)];
  r.step_ms = step_ms;
  r.other_ms = 0.0;
  r.other_ms = std::max(0.0, step_ms - phase_sum_ms(r));
  // Kept only when a phase came back after another one: the totals say the rest.
  std::array<bool, kPhaseCount> seen{};
  bool interleaved = false;
  for (const PhaseSpan& s : spans) {
    interleaved = interleaved || seen[static_cast<size_t>(s.phase)];
    seen[static_cast<size_t>(s.phase)] = true;
  }
  r.spans = interleaved ? spans : std::vector<PhaseSpan>();
}

namespace {

class SteadyPhaseTimer final : public PhaseTimer {
 public:
  void begin() override {
    SATURATE_ASSERT(!is_open_, "PhaseTimer::begin() inside an open step");
    is_open_ = true;
    current_ = {};
    start_ = last_ = Clock::now();
  }

  void mark(Phase phase) override {
    SATURATE_ASSERT(is_open_, "PhaseTimer::mark() outside a step");
    const auto now = Clock::now();
    const double ms = ms_between(last_, now);
    current_.ms[static_cast<size_t>(phase)] += ms;
    std::vector<PhaseSpan>& spans = current_.spans;
    if (!spans.empty() && spans.back().phase == static_cast<int>(phase))
      spans.back().ms = ms_between(start_, now) - spans.back().start_ms;
    else if (spans.size() < kMaxSpans)
      spans.push_back({static_cast<int>(phase), ms_between(start_, last_), ms});
    last_ = now;
  }

  int64_t finish() override {
    SATURATE_ASSERT(is_open_, "PhaseTimer::finish() outside a step");
    is_open_ = false;
    current_.step_ms = ms_between(start_, Clock::now());
    done_.emplace(next_ticket_, current_);
    return next_ticket_++;
  }

  bool ready(int64_t ticket) override { return done_.count(ticket) != 0; }

  void read(int64_t ticket, StepRecord& record) override {
    auto it = done_.find(ticket);
    SATURATE_ASSERT(it != done_.end(), "PhaseTimer::read() of an unknown ticket ", ticket);
    it->second.apply(record);
    done_.erase(it);
  }

  std::string clock_name() const override { return "steady_clock"; }

 private:
  using Clock = std::chrono::steady_clock;
  static double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  static constexpr size_t kMaxSpans = 4096;  // a step's trace detail stays bounded
  bool is_open_ = false;
  Clock::time_point start_, last_;
  detail::PhaseTimes current_;
  std::map<int64_t, detail::PhaseTimes> done_;
  int64_t next_ticket_ = 0;
};

}  // namespace

std::unique_ptr<PhaseTimer> make_steady_phase_timer() {
  return std::make_unique<SteadyPhaseTimer>();
}

}  // namespace saturate
