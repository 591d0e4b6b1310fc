#pragma once
// A row split across a software cluster: ctas_per_row consecutive CTAs of a cooperative launch
// that exchange their row totals through global memory (KernelSpec::global_exchange), for GPUs
// without thread-block clusters of that size. The same calls as codegen_sm90's, in the same
// places; the slots and their counts live in the kernel's tn_exchange parameter.
#include <cstddef>
#include <ostream>
#include <vector>

#include "codegen_sm90.hpp"

namespace tilenorm::codegen_exchange {

using codegen_sm90::ClusterReduction;

// Declarations every software-cluster kernel starts with: the grid check, this CTA's rank, the
// cluster's index and count, and pointers to this cluster's `buffers` exchange buffers of
// `floats_per_phase` floats per row group and rank, with one arrival count each.
void emit_prologue(std::ostream& out, int ctas, std::size_t floats_per_phase, int buffers);

// The floats of tn_exchange one cluster takes: a count and a buffer of slots per buffer.
std::size_t exchange_floats_per_cluster(int ctas, int rows_per_cta, std::size_t floats_per_phase,
                                        int buffers);

// Each row group's first thread stores its CTA's totals into this CTA's slots of the current
// buffer and counts them (a release); the combine waits until every CTA of the cluster has
// counted (an acquire) and adds the slots in rank order, so every CTA gets the same bits.
void emit_exchange_push(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                        int rows_per_cta);
void emit_exchange_combine(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                           int rows_per_cta);

}  // namespace tilenorm::codegen_exchange
