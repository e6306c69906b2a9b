// SPDX-License-Identifier: Apache-2.0
#pragma once
// TuneState: what the tuner's stages share (the user's configuration, the one they have settled
// on so far, the plan being written, measurements by configuration) and the helpers every stage
// uses to measure, compare, adopt and report. Private to src/tune: a stage is a function
// `void run(TuneState&)` in its own file under src/tune/stages/, listed in tuner.cpp's table.
//
//   void threads(TuneState& s) {
//     Pick p = s.pick_fastest("threads", candidates, OnTrialError::kRethrow);
//     s.finish_stage("threads", before, s.sps(p.outcome), changed, p.tried + ...);
//     s.adopt(p.config, p.outcome);
//   }

#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "saturate/tune/batch_search.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/trial.h"
#include "saturate/tune/tuner.h"

namespace saturate::tune_detail {

/// Thrown at a trial boundary once the stop flag is set; tune() returns the plan so far.
struct Interrupted {};
/// Thrown by the check when one sample does not fit one process but the model splits over
/// processes (TuneOptions::model_splits): tune() returns the user's configuration for the
/// caller's ranks stage. `why`: the check's numbers.
struct DoesNotFit {
  std::string why;
};

/// One configuration a stage may move to, and how its report names it ("bf16", "4 threads").
struct Candidate {
  RunConfig config;
  std::string label;
};

/// What pick_fastest measured: the configuration kept (the incumbent unless a candidate beat
/// it by the noise rule), its outcome, and "label X samples/s, label out of memory, ...".
struct Pick {
  RunConfig config;
  TrialOutcome outcome;
  std::string tried;
};

/// A candidate whose trial throws saturate::Error (a model that cannot run a layout, say).
enum class OnTrialError {
  kRethrow,  ///< the tune fails
  kSkip,     ///< reported as "cannot run (...)"; the other candidates are still tried
  kStop,     ///< reported as "cannot run (...)"; no further candidate is tried
};

class TuneState {
 public:
  TuneState(TrialRunner& runner, const RunConfig& base, const TuneOptions& options,
            const std::function<void(const PlanStage&)>& on_stage);

  TrialRunner& runner;
  const RunConfig base;      ///< the user's configuration
  const TuneOptions o;
  Plan plan;
  RunConfig current;          ///< what the stages have settled on so far
  TrialOutcome current_out;   ///< its measurement
  bool metric_is_share = true;  ///< the guard's metric is a share (accuracy), shown in points
  bool base_fits = false;     ///< the user's configuration ran under the limit (baseline stage)
  BatchSearchResult search;   ///< the batch stage's search (largest_safe 0: not run)

  // Time and stopping.
  double elapsed_s() const;
  double left_s() const;            ///< of the budget; infinity without one
  bool search_time_spent() const;   ///< the optional stages' share of the budget is spent
  void check_stop() const;          ///< throws Interrupted once the stop flag is set

  // Memory.
  int64_t target_bytes() const;  ///< the memory limit less the reserve
  bool safe(const TrialOutcome& t) const;

  // Measuring and comparing.
  static double sps(const TrialOutcome& t) { return t.fits ? t.measurement.samples_per_s : 0.0; }
  /// Measures `c` once per tune; later stages reuse the measurement of the same settings.
  const TrialOutcome& measured(const RunConfig& c, const std::string& stage);
  /// A fresh measurement of `c` that nothing has selected (the confirm stage).
  TrialOutcome fresh(const RunConfig& c, const std::string& stage);
  /// Samples/s of `c` as measured so far (0 when it has not been).
  double known_sps(const RunConfig& c) const;
  /// The measurement taken of `c` if any; else an unmeasured outcome (fits, 0 samples/s).
  TrialOutcome cached(const RunConfig& c) const;
  /// Stores `t` as the measurement of `c` (what the batch search measured for it).
  const TrialOutcome& remember(const RunConfig& c, const TrialOutcome& t);
  /// Replaces the measurement of `c` with `t` (a mean of fresh readings); the current
  /// configuration's too when `c` is it.
  void store(const RunConfig& c, const TrialOutcome& t);
  /// Two readings as one: the mean samples/s, both readings' steps, the larger peak. An
  /// out-of-memory reading makes the whole one so.
  static TrialOutcome mean_of(const TrialOutcome& a, const TrialOutcome& b);
  /// `a` beats `b` by the noise rule and is safe.
  bool better(const TrialOutcome& a, const TrialOutcome& b) const;
  /// Measures each candidate in order and keeps the fastest that beats the current
  /// configuration (or the one given) beyond noise. A winner is measured again, then the
  /// incumbent, in the reverse of their first order, and kept only if it wins again: the machine
  /// drifts over a tune (readings of one configuration a minute apart differ by up to 2× on
  /// a shared 2-core VM), and the later of two readings would otherwise win by drift alone.
  Pick pick_fastest(const std::string& stage, const std::vector<Candidate>& candidates,
                    OnTrialError on_error);
  Pick pick_fastest(const std::string& stage, const RunConfig& from, const TrialOutcome& from_out,
                    const std::vector<Candidate>& candidates, OnTrialError on_error);

  // Settling and reporting.
  /// Moves the tune to `c`; the last configuration that measured safe is kept for the end.
  void adopt(const RunConfig& c, const TrialOutcome& t);
  /// Sets the evaluation batch of the current and the last safe configuration.
  void set_eval_batch(int64_t eval_batch);
  void record(const std::string& stage, const std::string& purpose, const RunConfig& c,
              const TrialOutcome& t);
  void finish_stage(const std::string& name, double before, double after, bool changed,
                    const std::string& why);
  /// Reports an optional stage as skipped when the search's share of the budget is spent.
  bool skip_over_budget(const std::string& stage);
  /// Sets the plan's effective-batch outcome and why.
  void set_effective_batch(EffectiveBatchOutcome outcome, const std::string& why);
  static void set_measured(PlanResult& r, const TrialOutcome& t);

  /// The configuration the user would have trained: the base, or when it does not fit, the
  /// base split into micro-batches that do.
  RunConfig reference() const;
  /// The user's optimisation with this tune's math-preserving settings (input pipeline,
  /// threads, memory format, evaluation batch, and accumulation where the batch does not fit).
  RunConfig safe_reference() const;

  /// The end of the tune: back to the last safe configuration if the current one is not, and
  /// the plan's totals. Returns the plan.
  Plan finish();

 private:
  std::function<void(const PlanStage&)> on_stage_;
  std::chrono::steady_clock::time_point start_;
  RunConfig last_safe_;
  TrialOutcome last_safe_out_;
  bool has_safe_ = false;
  std::map<std::string, TrialOutcome> cache_;

  void replicate(const std::string& stage, const RunConfig& from, const TrialOutcome& from_out,
                 const std::string& label, Pick& best, std::ostringstream& tried);
};

std::string pct(double fraction);
/// "; step 12.3 ms: data 4.0%, forward 30.1%, ..." or empty.
std::string breakdown(const Measurement& m);

// The stages, in tuner.cpp's table order.
void check(TuneState& s);
void baseline(TuneState& s);
void precision(TuneState& s);
void memory_format(TuneState& s);
void batch_size(TuneState& s);
void memory_savers(TuneState& s);
void input_pipeline(TuneState& s);
void threads(TuneState& s);
void eval_batch(TuneState& s);
void quality_guard(TuneState& s);
void confirm(TuneState& s);

}  // namespace saturate::tune_detail
