#pragma once
// The parts of code generation that only sm_90 and later GPUs run: a row split across the CTAs
// of a thread-block cluster. codegen.cpp calls these when KernelConfig::ctas_per_row > 1.
#include <cstddef>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

namespace tilenorm::codegen_sm90 {

// The fields of the prelude's tn::Comoment, in order: the floats a co-moment's state takes
// wherever it is combined across warps or CTAs.
inline constexpr const char* kComomentFields[] = {"n", "avg_a", "avg_b", "c"};

// One row reduction the cluster combines: its accumulator variable (a float, or a
// tn::Comoment for a co-moment) and its ReduceOp constant.
struct ClusterReduction {
  std::string accumulator;
  std::string op;
  bool comoment = false;
  // A co-moment's tn::Counts: what is known of the number of columns of each CTA.
  std::string counts = "tn::Counts::any";
  bool variance = false;  // a co-moment of one operand with itself
};

// The floats a reduction's state takes in an exchange: 1, or a co-moment's 4 fields.
std::size_t exchange_floats(const ClusterReduction& reduction);

// The floats of state one exchange of these reductions moves per row.
std::size_t phase_floats(const std::vector<ClusterReduction>& reductions);

// Declarations every cluster kernel starts with: the cluster size check, this CTA's rank and
// the first column of its slice, the cluster's index and count, and `buffers` exchange buffers
// with their mbarriers (for up to `floats_per_phase` floats of state per phase and row group:
// each of a CTA's RPC rows has its own slots, and one exchange serves them all).
void emit_prologue(std::ostream& out, int ctas, std::size_t floats_per_phase, int buffers);

// Turning CTA totals (every thread of the CTA holds them) into row totals takes two steps:
// pushing this CTA's totals to every CTA of the cluster, then waiting for the cluster's and
// combining them in rank order into the same accumulators. Exchanges are pushed and combined
// in the same order; a pipelined kernel pushes the next one before combining this one.
void emit_exchange_push(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                        int rows_per_cta);
void emit_exchange_combine(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                           int rows_per_cta);

// The end of a kernel with exchanges: emit_exit_arrive() after the last one, emit_exit_wait()
// last of all. The mbarrier waits already order every store into a CTA's shared memory before
// it exits, but compute-sanitizer racecheck (and the CUDA guide's rule for distributed shared
// memory) wants a cluster barrier before exit; split in two, it costs one barrier latency at
// most, overlapped with the work between the calls.
void emit_exit_arrive(std::ostream& out);
void emit_exit_wait(std::ostream& out);

}  // namespace tilenorm::codegen_sm90
