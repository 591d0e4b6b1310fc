#include "codegen_sm90.hpp"

namespace tilenorm::codegen_sm90 {

void emit_prologue(std::ostream& out, int ctas, int rows_per_cta,
                   std::size_t reductions_per_phase) {
  out << "  constexpr int CLUSTER = " << ctas << ";  // CTAs that split each row\n"
      << "  // Launched without clusters of CLUSTER CTAs, the row totals would be wrong: stop.\n"
      << "  if (tn::cluster_ctas() != CLUSTER) __trap();\n"
      << "  const int tn_slice_start = static_cast<int>(tn::cluster_rank()) * (ITERS * TPR * "
         "VEC);\n"
      << "  const long long tn_cluster = tn::cluster_index();\n"
      << "  const long long tn_clusters = tn::cluster_count();\n";
  if (reductions_per_phase > 0) {
    out << "  __shared__ float tn_cluster_partials[2][" << rows_per_cta * reductions_per_phase
        << "];\n"
        << "  int tn_cluster_parity = 0;  // alternates per phase, also across row blocks\n";
  }
}

void emit_row_reduction(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                        std::size_t reductions_per_phase) {
  // Two alternating buffers, as within a CTA: the next write to a buffer comes after the next
  // phase's cluster barrier, which every CTA passes only after reading this phase's values.
  out << "  {\n    float* exchange = tn_cluster_partials[tn_cluster_parity] + row_in_cta * "
      << reductions_per_phase << ";\n    tn_cluster_parity ^= 1;\n    if (lane == 0) {\n";
  for (std::size_t j = 0; j < reductions.size(); ++j)
    out << "      exchange[" << j << "] = " << reductions[j].accumulator << ";\n";
  out << "    }\n    tn::cluster_sync();\n";
  for (std::size_t j = 0; j < reductions.size(); ++j) {
    out << "    " << reductions[j].accumulator << " = tn::cluster_combine<" << reductions[j].op
        << ", CLUSTER>(exchange + " << j << ");\n";
  }
  out << "  }\n";
}

void emit_epilogue(std::ostream& out) {
  out << "  tn::cluster_sync();\n";
}

}  // namespace tilenorm::codegen_sm90
