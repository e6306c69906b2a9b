// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/effective_batch.h"

#include <algorithm>
#include <cmath>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"

namespace saturate {

EffectiveBatch parse_effective_batch(const std::string& text) {
  if (text == "auto") return EffectiveBatch::kAuto;
  if (text == "keep") return EffectiveBatch::kKeep;
  if (text == "rescale") return EffectiveBatch::kRescale;
  if (text == "grow") return EffectiveBatch::kGrow;
  SATURATE_CHECK(false, "tune: --effective-batch must be auto, keep, rescale or grow, got '", text,
                 "'");
  return EffectiveBatch::kAuto;
}

std::string to_string(EffectiveBatch e) {
  switch (e) {
    case EffectiveBatch::kAuto: return "auto";
    case EffectiveBatch::kKeep: return "keep";
    case EffectiveBatch::kRescale: return "rescale";
    case EffectiveBatch::kGrow: return "grow";
  }
  return "auto";
}

const std::vector<std::string>& effective_batch_outcome_names() {
  static const std::vector<std::string> names = {"unchanged", "kept", "lr_rescaled",
                                                     "batch_changed"};
  return names;
}

std::string to_string(EffectiveBatchOutcome e) {
  return effective_batch_outcome_names()[static_cast<size_t>(e)];
}

EffectiveBatchOutcome parse_effective_batch_outcome(const std::string& text) {
  const auto& names = effective_batch_outcome_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<EffectiveBatchOutcome>(i);
  SATURATE_CHECK(false, "effective batch policy must be one of ", join(names, ", "), ", got '",
                 text, "'");
  return EffectiveBatchOutcome::kUnchanged;
}

double rescaled_lr(double lr, OptimizerKind optimizer, int64_t from, int64_t to) {
  SATURATE_CHECK(from > 0 && to > 0, "tune: batch sizes must be positive to rescale the LR");
  const double k = static_cast<double>(to) / static_cast<double>(from);
  return optimizer == OptimizerKind::kSgd ? lr * k : lr * std::sqrt(k);
}

std::string lr_rule_name(OptimizerKind optimizer) {
  return optimizer == OptimizerKind::kSgd ? "linear rule for SGD" : "square-root rule for AdamW";
}

int64_t micro_batches_for(int64_t batch, int64_t micro) {
  SATURATE_CHECK(micro > 0, "a micro-batch must hold at least one sample");
  return std::max<int64_t>(1, (batch + micro - 1) / micro);
}

namespace {

// The user's batch as micro-batches of at most min(found, largest safe).
BatchChoice keep_user_batch(const RunConfig& current, int64_t user, int64_t found,
                            int64_t largest_safe) {
  const bool grow = found > user;
  const bool user_fits = largest_safe >= user;
  const int64_t micro = std::min(found, largest_safe);
  BatchChoice c;
  c.config = current;
  c.config.train.batch_size = user;
  c.config.train.accumulate = user_fits && grow ? 1 : micro_batches_for(user, micro);
  c.outcome = EffectiveBatchOutcome::kKept;
  c.why = grow ? "batch " + std::to_string(found) +
                     " measured faster, but --effective-batch keep holds your batch of " +
                     std::to_string(user)
               : "your batch of " + std::to_string(user) + " kept as " +
                     std::to_string(c.config.train.accumulate) + " micro-batches of at most " +
                     std::to_string(c.config.micro_batch()) +
                     (user_fits ? " (faster than one large step)"
                                : " (one step of " + std::to_string(user) + " does not fit)") +
                     "; the learning rate is unchanged";
  return c;
}

}  // namespace

BatchChoice choose_effective_batch(const RunConfig& current, const RunConfig& base, int64_t found,
                                   int64_t largest_safe, EffectiveBatch policy) {
  const int64_t user = base.train.batch_size;
  const bool grow = found > user, shrink = found < user;
  if (!grow && !shrink) {
    BatchChoice c;
    c.config = current;
    c.config.train.accumulate = 1;
    c.why = "the searched batch equals yours (" + std::to_string(user) + ")";
    return c;
  }
  if ((grow && policy == EffectiveBatch::kKeep) || (shrink && policy != EffectiveBatch::kRescale))
    return keep_user_batch(current, user, found, largest_safe);
  BatchChoice c;
  c.config = current;
  c.config.train.accumulate = 1;
  c.config.train.batch_size = found;
  if (policy == EffectiveBatch::kGrow) {
    c.outcome = EffectiveBatchOutcome::kBatchChanged;
    c.why = "batch " + std::to_string(user) + " → " + std::to_string(found) +
            "; the learning rate stays the program's own (saturate cannot set it), so the "
            "quality guard judges the change";
    return c;
  }
  c.config.train.lr = rescaled_lr(base.train.lr, base.train.optimizer, user, found);
  if (c.config.train.warmup_steps == 0) c.config.train.warmup_steps = -1;  // default warm-up
  c.outcome = EffectiveBatchOutcome::kLrRescaled;
  c.why = "batch " + std::to_string(user) + " → " + std::to_string(found) + ": learning rate " +
          format_fixed(base.train.lr, 6) + " → " + format_fixed(c.config.train.lr, 6) + " (" +
          lr_rule_name(base.train.optimizer) + ") with linear warm-up";
  return c;
}

BatchChoice goodput_batch(const RunConfig& current, const RunConfig& base,
                          const GoodputChoice& g) {
  BatchChoice c;
  c.config = current;
  c.config.train.accumulate = 1;
  c.config.train.batch_size = g.chosen;
  if (g.chosen == base.train.batch_size) {
    c.config.train.lr = base.train.lr;
    c.why = "your batch of " + std::to_string(g.chosen) + " kept by goodput: " + g.why;
    return c;
  }
  c.config.train.lr = base.train.lr * g.lr_multiplier;
  if (c.config.train.warmup_steps == 0) c.config.train.warmup_steps = -1;  // default warm-up
  c.outcome = EffectiveBatchOutcome::kLrRescaled;
  c.why = "batch " + std::to_string(base.train.batch_size) + " → " + std::to_string(g.chosen) +
          " by goodput, learning rate " + format_fixed(base.train.lr, 6) + " → " +
          format_fixed(c.config.train.lr, 6) + ": " + g.why;
  return c;
}

RunConfig split_to_fit(const RunConfig& base, int64_t largest_safe) {
  RunConfig ref = base;
  if (largest_safe > 0) {
    const int64_t micro = std::max<int64_t>(1, largest_safe / 2);
    ref.train.accumulate = micro_batches_for(ref.train.batch_size, micro);
  }
  return ref;
}

namespace {

// "64 (2 ranks × 32)", or "32 (2 × 16)" for the plan's side.
std::string describe_global(int64_t global, int world, int64_t per_rank, const char* ranks) {
  return std::to_string(global) + (world > 1 ? " (" + std::to_string(world) + ranks + " × " +
                                                   std::to_string(per_rank) + ")"
                                             : std::string());
}

}  // namespace

BatchReplay replay_plan_batch(const RunConfig& plan_config, EffectiveBatchOutcome outcome,
                              const ReplayRequest& request) {
  const TrainOptions& p = plan_config.train;
  const int plan_world = plan_config.world_size, world = request.world;
  const bool same_world = world == plan_world;
  BatchReplay r;
  r.batch_size = request.batch_given ? request.batch_size : p.batch_size;
  r.accumulate = request.accumulate_given ? request.accumulate : p.accumulate;
  r.lr = request.lr_given ? request.lr : p.lr;
  // "kept": the plan holds the user's global batch; more ranks take fewer samples each.
  if (!request.batch_given && !same_world && outcome == EffectiveBatchOutcome::kKept &&
      (p.batch_size * plan_world) % world == 0) {
    r.batch_size = p.batch_size * plan_world / world;
    r.info.push_back(std::to_string(world) + " ranks instead of the plan's " +
                     std::to_string(plan_world) + ": batch " + std::to_string(r.batch_size) +
                     " per rank keeps the plan's global batch " +
                     std::to_string(p.batch_size * plan_world));
  }
  if (r.batch_size != p.batch_size && !request.accumulate_given) {
    r.accumulate = 1;
    if (p.accumulate > 1) {
      // The plan's micro-batch fits in memory: keep it.
      const int64_t micro = plan_config.micro_batch();
      r.accumulate = micro_batches_for(r.batch_size, micro);
      r.info.push_back("batch " + std::to_string(r.batch_size) + " per rank instead of the plan's " +
                       std::to_string(p.batch_size) + ": " + std::to_string(r.accumulate) +
                       " micro-batches of at most " + std::to_string(micro) +
                       " (the plan's micro-batch, which fits in memory)");
    }
  }
  const int64_t plan_global = p.batch_size * plan_world, global = r.batch_size * world;
  if (global == plan_global || request.lr_given) return r;
  const std::string change = "global batch " + describe_global(global, world, r.batch_size, " ranks") +
                             " instead of the plan's " +
                             describe_global(plan_global, plan_world, p.batch_size, "");
  const double scaled = rescaled_lr(p.lr, p.optimizer, plan_global, global);
  const char* rule = p.optimizer == OptimizerKind::kSgd ? "linear, SGD" : "square root, AdamW";
  if (outcome == EffectiveBatchOutcome::kLrRescaled) {
    r.lr = scaled;
    r.info.push_back(change + ": learning rate rescaled " + format_fixed(p.lr, 6) + " → " +
                     format_fixed(r.lr, 6) + " by the plan's rule (" + rule + ")");
  } else if (!same_world) {
    // The plan made no claim about other batches: say what changed and what the rule would do.
    r.warn.push_back(change + "; the learning rate stays the plan's " + format_fixed(p.lr, 6) +
                     " (its effective batch is '" + to_string(outcome) + "'); the " + rule +
                     " rule would give --lr " + format_fixed(scaled, 6));
  }
  return r;
}

}  // namespace saturate
