#include "tilenorm/autotune/tuner.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "tilenorm/autotune/search_space.hpp"
#include "tilenorm/autotune/tuning_db_writer.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
#include "tilenorm/runtime/runtime.hpp"
#include "tilenorm/runtime/stats.hpp"
#include "tilenorm/runtime/timing.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace tilenorm {
namespace {

constexpr std::size_t kCopyBytes = std::size_t{1} << 30;
constexpr std::int64_t kBandwidthElements = std::int64_t{1} << 26;
constexpr std::int64_t kSmallBatchRows = 256;
constexpr std::int64_t kCheckReferenceRows = 16;
constexpr std::size_t kBufferAlignment = 256;
constexpr unsigned char kInputFill = 0x3C;  // a small finite value in fp32, fp16 and bf16
constexpr int kFinalRounds = 5;  // finalists are timed interleaved, so drift hits all alike
// A memset this large keeps the GPU busy (~0.3 ms) while the host enqueues a batch of timed
// launches, so host-side launch overhead never shows up between a batch's events.
constexpr std::size_t kQueueBlockerBytes = std::size_t{1} << 30;

// After a kernel fault the context is unusable and every later call fails: stop the sweep.
class ContextLost : public Error {
 public:
  using Error::Error;
};

void ensure_context_usable(const std::string& after) {
  try {
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
  } catch (const driver::CudaError& e) {
    throw ContextLost("the CUDA context is unusable after " + after + " (" + e.what() +
                      "); rerun the shapes that did not finish in a new process");
  }
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// Why a configuration cannot be a candidate, before any timing.
struct Problem {
  DropKind kind;
  std::string text;  // led by the kind's name: "spills 48 bytes ...", "wrong results: ..."
};

// `detail` follows the kind's name as written: " 48 bytes ..." or ": what went wrong".
Problem problem(DropKind kind, const std::string& detail) {
  return {kind, std::string(drop_kind_name(kind)) + detail};
}

std::string shape_name(const TuneShape& shape) {
  return shape.kernel + " " + tuning_dtype_key(shape.io_dtype, shape.param_dtype) +
         " N=" + std::to_string(shape.n);
}

std::size_t round_up(std::size_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

class Progress {
 public:
  Progress(const std::function<void(const TuneProgress&)>& callback, std::size_t total)
      : callback_(callback), total_(total) {}

  void step(const std::string& stage) { advance_to(std::nullopt, stage); }
  // Skips units that a failure left undone, so the total stays exact.
  void finish(std::size_t done, const std::string& stage) { advance_to(done, stage); }

 private:
  void advance_to(std::optional<std::size_t> done, const std::string& stage) {
    std::lock_guard lock(mutex_);
    done_ = done ? std::max(done_, *done) : done_ + 1;
    if (callback_) callback_({std::min(done_, total_), total_, stage});
  }

  const std::function<void(const TuneProgress&)>& callback_;
  std::size_t total_;
  std::size_t done_ = 0;
  std::mutex mutex_;
};

// Row tensors (and statistics) for several launches, together larger than twice the L2, so each
// timed launch reads inputs the previous launches did not leave in the cache.
class BufferSets {
 public:
  BufferSets(const ir::Program& program, const TuneShape& shape, std::int64_t rows,
             std::size_t l2_bytes) {
    const auto m = static_cast<std::size_t>(rows);
    // Each row tensor at its own dtype (a program may fix one wider than the rows').
    auto tensor_bytes = [&](const ir::Slot& slot) {
      return round_up(m * static_cast<std::size_t>(shape.n) *
                      dtype_size(ir::storage_dtype(slot, shape.io_dtype, shape.param_dtype)));
    };
    const std::size_t stat_bytes = round_up(m * sizeof(float));
    std::size_t row_bytes = 0, row_stats = 0;
    for (const ir::Slot& slot : program.slots) {
      if (slot.shape == ir::Shape::tile) row_bytes += tensor_bytes(slot);
      row_stats += slot.shape == ir::Shape::row_scalar;
    }
    const std::size_t set_bytes = row_bytes + row_stats * stat_bytes;
    const std::size_t count = std::max<std::size_t>(2, 2 * l2_bytes / row_bytes + 2);
    std::size_t free_bytes = 0, total_bytes = 0;
    driver::check(driver::api().cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
    if (count * set_bytes > free_bytes) {
      throw Error("timing " + shape_name(shape) + " M=" + std::to_string(rows) + " needs " +
                  std::to_string(count * set_bytes) + " bytes of device memory (" +
                  std::to_string(count) + " buffer sets); only " + std::to_string(free_bytes) +
                  " are free");
    }
    slab_ = driver::DeviceBuffer(count * set_bytes);
    slab_.fill_bytes(kInputFill);
    // Parameters and column or scalar outputs are shared by every set: a real model reuses
    // its weights too.
    std::vector<std::optional<Arg>> shared(program.slots.size());
    for (std::size_t i = 0; i < program.slots.size(); ++i) {
      const ir::Slot& slot = program.slots[i];
      const DType dtype = ir::storage_dtype(slot, shape.io_dtype, shape.param_dtype);
      if (slot.shape == ir::Shape::column) {
        auto& buffer =
            shared_buffers_.emplace_back(static_cast<std::size_t>(shape.n) * dtype_size(dtype));
        buffer.fill_bytes(kInputFill);
        shared[i] = Arg(ColumnView{reinterpret_cast<void*>(buffer.get()), dtype, shape.n});
      } else if (slot.shape == ir::Shape::scalar && slot.role == ir::Role::read) {
        shared[i] = Arg(slot.needs_grad ? 0.75f : 1e-5f);
      } else if (slot.shape == ir::Shape::scalar) {
        auto& buffer = shared_buffers_.emplace_back(sizeof(float));
        shared[i] = Arg(ScalarView{reinterpret_cast<float*>(buffer.get())});
      }
    }
    auto* base = reinterpret_cast<std::byte*>(slab_.get());
    for (std::size_t s = 0; s < count; ++s) {
      std::byte* next = base + s * set_bytes;
      auto carve = [&next](std::size_t bytes) {
        std::byte* start = next;
        next += bytes;
        return start;
      };
      std::vector<Arg> set;
      for (std::size_t i = 0; i < program.slots.size(); ++i) {
        const ir::Slot& slot = program.slots[i];
        if (shared[i]) {
          set.push_back(*shared[i]);
        } else if (slot.shape == ir::Shape::tile) {
          set.push_back(TensorView::contiguous(
              carve(tensor_bytes(slot)), ir::storage_dtype(slot, shape.io_dtype, shape.param_dtype),
              rows, shape.n));
        } else {
          set.push_back(RowStatView{reinterpret_cast<float*>(carve(stat_bytes)), rows});
        }
      }
      sets_.push_back(std::move(set));
    }
    // The fills ran on the legacy stream, which the timing stream does not wait for.
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize after filling the buffers");
  }

  std::size_t count() const { return sets_.size(); }

  KernelArgs args(std::size_t index) const { return sets_[index]; }

 private:
  driver::DeviceBuffer slab_;
  std::deque<driver::DeviceBuffer> shared_buffers_;
  std::vector<std::vector<Arg>> sets_;
};

// Times launches through Norm::launch, the path users take, rotating over the buffer sets.
class Timer {
 public:
  Timer(const Norm& norm, const BufferSets& sets, const driver::DeviceBuffer& queue_blocker)
      : norm_(norm), sets_(sets), queue_blocker_(queue_blocker) {}

  // Appends the time of each of `count` launches (µs), after `warmup` untimed ones.
  void time(const KernelConfig& config, int warmup, int count, std::vector<double>& samples_us) {
    for (int i = 0; i < warmup; ++i) launch(config);
    std::vector<driver::Event> starts(static_cast<std::size_t>(count));
    std::vector<driver::Event> ends(static_cast<std::size_t>(count));
    driver::check(driver::api().cuMemsetD8Async(queue_blocker_.get(), 0, queue_blocker_.bytes(),
                                                stream_.get()),
                  "cuMemsetD8Async (queue blocker)");
    for (int i = 0; i < count; ++i) {
      starts[i].record(stream_.get());
      launch(config);
      ends[i].record(stream_.get());
    }
    stream_.synchronize();
    for (int i = 0; i < count; ++i) {
      samples_us.push_back(1000.0 * driver::Event::elapsed_ms(starts[i], ends[i]));
    }
  }

 private:
  void launch(const KernelConfig& config) {
    const std::size_t needed = norm_.workspace_bytes(sets_.args(next_set_), config);
    if (needed > workspace_.bytes()) workspace_ = driver::DeviceBuffer(needed);
    norm_.launch(sets_.args(next_set_), stream_.get(), config,
                 {reinterpret_cast<void*>(workspace_.get()), workspace_.bytes()});
    next_set_ = (next_set_ + 1) % sets_.count();
  }

  const Norm& norm_;
  const BufferSets& sets_;
  const driver::DeviceBuffer& queue_blocker_;
  driver::Stream stream_;
  driver::DeviceBuffer workspace_;  // grown before timing, by the warm-up launches
  std::size_t next_set_ = 0;
};

// A spill drops a candidate of the search space, but not a heuristic default: that is what the
// runtime launches when the database has no entry, so the tuner's winner must be timed against
// it, spills and all (LayerNorm's fp32 recomputing backward at N = 262144 spills 16 bytes and
// ran at 56% of the copy ceiling, where the tuner, without it, stored a candidate at 44%).
std::optional<Problem> compile_problem(const LoweredProgram& program, const KernelSpec& spec,
                                       const std::string& arch, bool spills_allowed) {
  try {
    const BuiltKernel built = build_kernel(program, spec, arch);
    if (built.spill_bytes > 0 && !spills_allowed) {
      return problem(DropKind::spills, " " + std::to_string(built.spill_bytes) +
                                           " bytes to local memory (" +
                                           std::to_string(built.registers) + " registers)");
    }
    return std::nullopt;
  } catch (const std::exception& e) {
    return problem(DropKind::does_not_compile, ": " + first_line(e.what()));
  }
}

// Compiles every configuration through the disk cache on a thread pool (NVRTC is thread-safe),
// so the launches that follow load CUBINs instead of compiling one at a time; for `arch`, the
// runtime's target (Runtime::arch()).
std::vector<std::optional<Problem>> compile_all(
    const LoweredProgram& program, const TuneShape& shape, const std::vector<KernelConfig>& configs,
    const std::vector<KernelConfig>& heuristics, const driver::DeviceInfo& device,
    const DeviceLimits& limits, const std::string& arch, unsigned threads, Progress& progress) {
  std::vector<std::optional<Problem>> problems(configs.size());
  const std::string stage = "compiling " + shape_name(shape);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < configs.size(); i = next++) {
      // Contiguous rows of N misalign for a vec that does not divide N: the runtime launches
      // the peeled kernel then, so that is the one to compile.
      KernelSpec spec{shape.io_dtype, shape.param_dtype, shape.n, configs[i]};
      spec.peel_rows = shape.n % configs[i].vec != 0;
      spec = fit_shared_memory(program, spec, limits);  // as the runtime will launch it
      const bool spills_allowed =
          std::find(heuristics.begin(), heuristics.end(), configs[i]) != heuristics.end();
      // The kernel with the column parameters fetched early and the one without, each where
      // the runtime will launch it for a timed M (a column_fetch of early or late takes one).
      auto early_at = [&](std::int64_t m) {
        return fetches_columns_early(program, spec, m, device);
      };
      const auto& rows = shape.row_counts;
      if (!std::all_of(rows.begin(), rows.end(), early_at))
        problems[i] = compile_problem(program, spec, arch, spills_allowed);
      if (std::any_of(rows.begin(), rows.end(), early_at) && !problems[i]) {
        spec.early_columns = true;
        problems[i] = compile_problem(program, spec, arch, spills_allowed);
      }
      progress.step(stage);
    }
  };
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 1; t < std::min<std::size_t>(threads, configs.size()); ++t) {
      pool.emplace_back(work);
    }
    work();
  }
  return problems;
}

// What the runtime launches for `rows` rows with no tuning entry (Runtime's resolve): the
// heuristic's configuration, or where NVRTC says that spills heavily, the one
// without_heavy_spills() takes in its place.
KernelConfig launched_heuristic(const LoweredProgram& program, const TuneShape& shape,
                                const DeviceLimits& limits, const driver::DeviceInfo& device,
                                std::int64_t rows) {
  const KernelConfig heuristic =
      contiguous_rows_heuristic(program, shape.io_dtype, shape.param_dtype, shape.n, limits, rows);
  return without_heavy_spills(heuristic, [&](const KernelConfig& config) -> std::optional<int> {
    KernelSpec spec{shape.io_dtype, shape.param_dtype, shape.n, config};
    spec.peel_rows = shape.n % config.vec != 0;
    spec = fit_shared_memory(program, spec, limits);
    if (config_problem(program, spec)) return std::nullopt;
    spec.early_columns = fetches_columns_early(program, spec, rows, device);
    try {
      return build_kernel(program, spec, target_arch(device.compute_capability(), device.label()))
          .spill_bytes;
    } catch (const Error&) {
      return std::nullopt;
    }
  });
}

std::optional<Problem> check_problem(const Norm& norm, const TuneShape& shape,
                                     const KernelConfig& config) {
  CheckOptions options;
  options.io_dtype = shape.io_dtype;
  options.param_dtype = shape.param_dtype;
  // More rows than the reference compares, and a partial last CTA.
  options.rows =
      std::max<std::int64_t>(kCheckReferenceRows + 1, 2 * std::int64_t{config.rows_per_cta} + 1);
  options.cols = shape.n;
  options.config = config;
  options.reference_rows = kCheckReferenceRows;
  try {
    const CheckReport report = check_against_interpreter(norm, options);
    if (!report.ok()) return problem(DropKind::wrong_results, ": " + report.describe());
    return std::nullopt;
  } catch (const driver::CudaError& e) {
    ensure_context_usable("checking " + short_config(config));
    return problem(DropKind::check_failed, ": " + std::string(e.what()));
  } catch (const Error& e) {
    return problem(DropKind::check_failed, ": " + std::string(e.what()));
  }
}

struct Session {
  const TuneOptions& options;
  driver::DeviceInfo info;
  DeviceLimits limits;
  double copy_tbps = 0;
  unsigned compile_threads = 1;
  driver::DeviceBuffer queue_blocker;
};

struct Plan {
  const TuneShape& shape;
  SearchSpace space;
  // What the runtime launches without a database at each M of shape.row_counts (the heuristic
  // for a launch of that many rows), and those of them the search space lacks, which are
  // compiled and checked as well.
  std::vector<KernelConfig> heuristics;
  std::vector<KernelConfig> extra_heuristics;
  std::size_t progress_units = 0;

  bool is_heuristic(const KernelConfig& config) const {
    return std::find(heuristics.begin(), heuristics.end(), config) != heuristics.end();
  }
};

struct ShapeOutcome {
  std::vector<TuneResult> results;
  std::vector<TuningEntry> entries;  // for the results that are ok
  std::string aborted;               // why the sweep must stop, when it must
};

TuneResult blank_result(const Plan& plan, std::size_t row_count) {
  TuneResult result;
  result.kernel = plan.shape.kernel;
  result.io_dtype = plan.shape.io_dtype;
  result.param_dtype = plan.shape.param_dtype;
  result.n = plan.shape.n;
  result.m = plan.shape.row_counts[row_count];
  result.heuristic = plan.heuristics[row_count];
  result.total = plan.space.total();
  result.pruned = plan.space.pruned.size();
  return result;
}

// Times the checked candidates at one M and fills in the winner, timing the heuristic default
// for this M (result.heuristic) among the finalists unless it failed.
void time_rows(const Norm& norm, const Plan& plan, const Session& session,
               const std::vector<KernelConfig>& checked, bool heuristic_checked, Progress& progress,
               TuneResult& result) {
  const TuneOptions& options = session.options;
  const BufferSets sets(norm.program(), plan.shape, result.m,
                        static_cast<std::size_t>(session.info.l2_bytes));
  Timer timer(norm, sets, session.queue_blocker);
  const std::string stage = "timing " + shape_name(plan.shape) + " M=" + std::to_string(result.m);

  // A launch that fails drops the configuration for this M, with the reason.
  auto try_time = [&](const KernelConfig& config, int count, std::vector<double>& samples) {
    std::string what;
    try {
      timer.time(config, options.warmup_launches, count, samples);
      return true;
    } catch (const driver::CudaError& e) {
      ensure_context_usable("launching " + short_config(config));
      what = e.what();
    } catch (const Error& e) {
      what = e.what();
    }
    const Problem failed = problem(DropKind::launch_failed, ": " + what);
    result.failures.push_back({config, failed.kind, failed.text});
    if (plan.space.contains(config)) ++result.failed;
    return false;
  };

  std::vector<std::pair<double, KernelConfig>> first_round;
  for (const KernelConfig& config : checked) {
    std::vector<double> samples;
    if (try_time(config, options.repeats, samples))
      first_round.emplace_back(median(samples), config);
    progress.step(stage);
  }
  result.timed = first_round.size();
  if (first_round.empty()) {
    result.error = "no candidate could be timed (" + std::to_string(result.failed) + " failed" +
                   (result.failures.empty() ? "" : ", first: " + result.failures.front().reason) +
                   ")";
    return;
  }

  std::stable_sort(first_round.begin(), first_round.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [us, config] : first_round) result.first_round.push_back({config, us});
  std::vector<KernelConfig> finalists;
  for (std::size_t i = 0;
       i < first_round.size() && finalists.size() < static_cast<std::size_t>(options.finalists);
       ++i) {
    finalists.push_back(first_round[i].second);
  }
  // The heuristic joins unless it failed: in the check, or (when in the space) in this round.
  const KernelConfig& heuristic_config = result.heuristic;
  const bool heuristic_survived =
      heuristic_checked &&
      (!plan.space.contains(heuristic_config) ||
       std::any_of(first_round.begin(), first_round.end(),
                   [&](const auto& timed) { return timed.second == heuristic_config; }));
  if (heuristic_survived &&
      std::find(finalists.begin(), finalists.end(), heuristic_config) == finalists.end()) {
    finalists.push_back(heuristic_config);
  }
  std::vector<std::vector<double>> samples(finalists.size());
  std::vector<bool> alive(finalists.size(), true);
  const int per_round = std::max(1, options.final_repeats / kFinalRounds);
  for (int round = 0; round < kFinalRounds; ++round) {
    for (std::size_t f = 0; f < finalists.size(); ++f) {
      if (alive[f]) alive[f] = try_time(finalists[f], per_round, samples[f]);
    }
  }

  std::optional<std::size_t> best;
  std::vector<double> medians(finalists.size(), 0.0);
  for (std::size_t f = 0; f < finalists.size(); ++f) {
    if (!alive[f]) continue;
    medians[f] = median(samples[f]);
    if (!best || medians[f] < medians[*best]) best = f;
  }
  if (!best) {
    result.error = "every finalist failed to launch (" + result.failures.back().reason + ")";
    return;
  }
  const ir::Program& program = norm.program();
  std::size_t row_tensors = 0;
  for (const ir::Slot& slot : program.slots) row_tensors += slot.shape == ir::Shape::tile;
  const double bytes = static_cast<double>(row_tensors) * static_cast<double>(result.m) *
                       static_cast<double>(plan.shape.n) *
                       static_cast<double>(dtype_size(plan.shape.io_dtype));
  result.ok = true;
  result.chosen = finalists[*best];
  result.median_us = medians[*best];
  result.tbps = bytes / (result.median_us * 1e-6) / 1e12;
  result.percent_of_copy = session.copy_tbps > 0 ? 100.0 * result.tbps / session.copy_tbps : 0;
  const auto heuristic = std::find(finalists.begin(), finalists.end(), heuristic_config);
  const auto heuristic_index = static_cast<std::size_t>(heuristic - finalists.begin());
  if (heuristic != finalists.end() && alive[heuristic_index]) {
    result.heuristic_us = medians[heuristic_index];
    result.speedup = result.heuristic_us / result.median_us;
  }
}

ShapeOutcome tune_shape(Runtime& runtime, const Plan& plan, const Session& session,
                        Progress& progress, std::size_t progress_end) {
  const TuneShape& shape = plan.shape;
  ShapeOutcome outcome;
  for (std::size_t i = 0; i < shape.row_counts.size(); ++i)
    outcome.results.push_back(blank_result(plan, i));
  auto fail_all = [&](const std::string& error) {
    for (TuneResult& result : outcome.results) {
      if (!result.ok && result.error.empty()) result.error = error;
    }
  };
  try {
    const Norm norm = runtime.load(shape.program);
    std::vector<KernelConfig> configs;
    for (const Candidate& candidate : plan.space.candidates) configs.push_back(candidate.config);
    configs.insert(configs.end(), plan.extra_heuristics.begin(), plan.extra_heuristics.end());
    const std::vector<std::optional<Problem>> compile_problems =
        compile_all(norm.lowered(), shape, configs, plan.heuristics, session.info, session.limits,
                    runtime.arch(), session.compile_threads, progress);

    // Check every compiled configuration once per shape, before any of its times count.
    std::vector<CandidateFailure> failures;
    std::vector<KernelConfig> checked, checked_heuristics;
    const std::string stage = "checking " + shape_name(shape);
    for (std::size_t i = 0; i < configs.size(); ++i) {
      std::optional<Problem> problem = compile_problems[i];
      if (!problem) problem = check_problem(norm, shape, configs[i]);
      progress.step(stage);
      const bool is_heuristic = plan.is_heuristic(configs[i]);
      if (problem) {
        // The reason stays led by its kind's name; a heuristic default says so after it.
        failures.push_back({configs[i], problem->kind,
                            problem->text + (is_heuristic ? " (the heuristic default)" : "")});
        continue;
      }
      if (is_heuristic) checked_heuristics.push_back(configs[i]);
      if (i < plan.space.candidates.size()) checked.push_back(configs[i]);
    }
    const std::size_t failed = static_cast<std::size_t>(
        std::count_if(failures.begin(), failures.end(),
                      [&](const CandidateFailure& f) { return plan.space.contains(f.config); }));

    for (TuneResult& result : outcome.results) {
      result.failures = failures;
      result.failed = failed;
      try {
        const bool heuristic_checked =
            std::find(checked_heuristics.begin(), checked_heuristics.end(), result.heuristic) !=
            checked_heuristics.end();
        time_rows(norm, plan, session, checked, heuristic_checked, progress, result);
      } catch (const driver::CudaError& e) {
        ensure_context_usable("timing at M=" + std::to_string(result.m));
        result.error = e.what();
      } catch (const ContextLost&) {
        throw;
      } catch (const Error& e) {
        result.error = e.what();
      }
      if (result.ok) {
        outcome.entries.push_back(
            {norm.tuning_key(shape.io_dtype, shape.param_dtype, shape.n, result.m),
             reflect::to_json(result.chosen), result.median_us, result.tbps, utc_date_time_now()});
      }
    }
  } catch (const ContextLost& e) {
    outcome.aborted = e.what();
    fail_all("not finished: the sweep stopped");
  } catch (const Error& e) {
    fail_all(e.what());
  }
  progress.finish(progress_end, "finished " + shape_name(shape));
  return outcome;
}

void validate(const TuneOptions& options) {
  if (options.warmup_launches < 0 || options.repeats < 1 || options.finalists < 1 ||
      options.final_repeats < 1) {
    throw Error("tune: need warmup_launches >= 0 and repeats, finalists, final_repeats >= 1");
  }
}

void validate(const TuneShape& shape) {
  const std::string name = "tune: " + shape_name(shape);
  if (shape.n < 1) throw Error(name + ": N must be at least 1");
  if (shape.row_counts.empty()) throw Error(name + ": no row counts (M) given");
  for (std::int64_t m : shape.row_counts) {
    if (m < 1) throw Error(name + ": M must be at least 1, got " + std::to_string(m));
  }
}

}  // namespace

std::string_view drop_kind_name(DropKind kind) {
  switch (kind) {
    case DropKind::does_not_compile:
      return "does not compile";
    case DropKind::spills:
      return "spills";
    case DropKind::wrong_results:
      return "wrong results";
    case DropKind::check_failed:
      return "check failed";
    case DropKind::launch_failed:
      return "launch failed";
  }
  throw Error("drop_kind_name: unknown kind " + std::to_string(static_cast<int>(kind)));
}

std::vector<std::int64_t> default_row_counts(std::int64_t n) {
  if (n < 1) throw Error("default_row_counts: N must be at least 1, got " + std::to_string(n));
  // Rounded up: the benchmark's M = 2^26 / N then falls in the very bucket that was tuned.
  const std::int64_t bandwidth_rows = m_bucket(std::max<std::int64_t>(1, kBandwidthElements / n));
  if (bandwidth_rows == kSmallBatchRows) return {bandwidth_rows};
  return {bandwidth_rows, kSmallBatchRows};
}

TuneReport tune(const std::vector<TuneShape>& shapes, const TuneOptions& options) {
  validate(options);
  for (const TuneShape& shape : shapes) validate(shape);
  driver::ScopedContext scope(driver::primary_context(0));
  Session session{
      options, driver::device_info(0), {}, 0, 1, driver::DeviceBuffer(kQueueBlockerBytes)};
  session.limits = device_limits(session.info);
  session.compile_threads = options.compile_threads > 0
                                ? options.compile_threads
                                : std::max(1u, std::thread::hardware_concurrency());
  TuneReport report;
  report.device_name = session.info.name;
  report.arch = session.info.arch();

  std::vector<Plan> plans;
  std::size_t total_units = 0;
  for (const TuneShape& shape : shapes) {
    const LoweredProgram lowered = lower(shape.program);
    Plan plan{
        shape,
        explore_search_space(lowered, shape.io_dtype, shape.param_dtype, shape.n, session.limits),
        {},
        {}};
    for (std::int64_t m : shape.row_counts) {
      const KernelConfig heuristic =
          launched_heuristic(lowered, shape, session.limits, session.info, m);
      plan.heuristics.push_back(heuristic);
      if (!plan.space.contains(heuristic) &&
          std::find(plan.extra_heuristics.begin(), plan.extra_heuristics.end(), heuristic) ==
              plan.extra_heuristics.end())
        plan.extra_heuristics.push_back(heuristic);
    }
    const std::size_t compiled = plan.space.candidates.size() + plan.extra_heuristics.size();
    // One unit per compile, per check, and per first-round timing at each M.
    plan.progress_units = 2 * compiled + shape.row_counts.size() * plan.space.candidates.size();
    total_units += plan.progress_units;
    plans.push_back(std::move(plan));
  }

  session.copy_tbps = measure_copy_ceiling_tbps(kCopyBytes);
  report.copy_tbps = session.copy_tbps;
  Runtime runtime(RuntimeOptions{0, false});
  Progress progress(options.on_progress, total_units);
  std::size_t progress_end = 0;
  for (const Plan& plan : plans) {
    progress_end += plan.progress_units;
    ShapeOutcome outcome = tune_shape(runtime, plan, session, progress, progress_end);
    report.results.insert(report.results.end(), outcome.results.begin(), outcome.results.end());
    if (!options.db_path.empty() && !outcome.entries.empty()) {
      try {
        upsert_entries(options.db_path, outcome.entries);
      } catch (const Error& e) {
        report.aborted = "writing the tuning database failed: " + std::string(e.what());
        return report;
      }
    }
    if (!outcome.aborted.empty()) {
      report.aborted = outcome.aborted;
      return report;
    }
  }
  return report;
}

}  // namespace tilenorm
