// SPDX-License-Identifier: Apache-2.0
#pragma once
// PhaseTimer: splits each training step into exclusive phases. On CPU it reads a steady clock;
// on CUDA it records events on the device's current stream and reads their times only once the
// device has passed them, so timing never stalls the stream. Results may therefore arrive a few
// steps late: ask ready() before read().
//
//   timer->begin();
//   auto batch = source.next();      timer->mark(Phase::kDataWait);
//   copy(batch);                     timer->mark(Phase::kHostToDevice);
//   ...                              timer->mark(Phase::kOptimizer);
//   const int64_t ticket = timer->finish();
//   if (timer->ready(ticket)) timer->read(ticket, record);   // fills the *_ms fields

#include <cstdint>
#include <memory>
#include <string>

#include "saturate/telemetry/step_record.h"

namespace saturate {

/// The exclusive phases of StepRecord, in step order.
enum class Phase { kDataWait, kHostToDevice, kForward, kBackward, kOptimizer, kCommunication };

/// Times the phases of one step at a time. Not thread-safe; steps are strictly sequential
/// (begin, marks, finish), while finished steps may be read in any order.
class PhaseTimer {
 public:
  virtual ~PhaseTimer() = default;
  /// Opens a step. The previous step must have been finished.
  virtual void begin() = 0;
  /// Closes the interval since the previous mark (or begin) and adds it to `phase`. A phase may
  /// be marked several times in a step (one forward/backward pair per micro-batch).
  virtual void mark(Phase phase) = 0;
  /// Closes the step: its wall time runs from begin() to now. Returns the ticket to read it by.
  virtual int64_t finish() = 0;
  /// True when read(ticket) will not wait for the device.
  virtual bool ready(int64_t ticket) = 0;
  /// Sets the phase fields and step_ms of `record` (other_ms = step_ms minus the phases, never
  /// negative), waiting for the device if the step is not yet ready, and forgets the ticket.
  virtual void read(int64_t ticket, StepRecord& record) = 0;
  /// "steady_clock" or "cuda_events", for reports.
  virtual std::string clock_name() const = 0;
};

/// Host steady clock: every step is ready as soon as it is finished.
std::unique_ptr<PhaseTimer> make_steady_phase_timer();

/// CUDA events on the current stream of device `index`. Throws saturate::Error when this build of
/// LibTorch has no CUDA.
std::unique_ptr<PhaseTimer> make_cuda_phase_timer(int index);

}  // namespace saturate
