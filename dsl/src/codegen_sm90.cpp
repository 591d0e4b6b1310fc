#include "codegen_sm90.hpp"

namespace tilenorm::codegen_sm90 {

std::size_t exchange_floats(const ClusterReduction& reduction) {
  return reduction.comoment ? std::size(kComomentFields) : 1;
}

void emit_prologue(std::ostream& out, int ctas, std::size_t floats_per_phase) {
  out << "  constexpr int CLUSTER = " << ctas << ";  // CTAs that split each row\n"
      << "  // Launched without clusters of CLUSTER CTAs, the row totals would be wrong: stop.\n"
      << "  if (tn::cluster_ctas() != CLUSTER) __trap();\n"
      << "  const unsigned tn_rank = tn::cluster_rank();\n"
      << "  const int tn_slice_start = static_cast<int>(tn_rank) * (ITERS * TPR * VEC);\n"
      << "  // Clusters are 1-D along x and the grid is a multiple of them.\n"
      << "  const long long tn_cluster = blockIdx.x / CLUSTER;\n"
      << "  const long long tn_clusters = gridDim.x / CLUSTER;\n";
  if (floats_per_phase == 0) return;
  // Two buffers and mbarriers, used alternately: a CTA pushes into a buffer again only two
  // exchanges later, after waiting on the exchange in between, which every CTA arrives on only
  // once it has read this one.
  out << "  __shared__ float tn_exchange_slots[2][" << floats_per_phase << " * CLUSTER];\n"
      << "  __shared__ unsigned long long tn_exchange_barrier[2];\n"
      << "  if (threadIdx.x == 0) {\n"
      << "    tn::exchange_init(&tn_exchange_barrier[0], CLUSTER);\n"
      << "    tn::exchange_init(&tn_exchange_barrier[1], CLUSTER);\n"
      << "  }\n"
      << "  tn::cluster_sync();  // every mbarrier is ready before any CTA arrives on it\n"
      << "  unsigned tn_exchanges = 0;\n";
}

void emit_row_reduction(std::ostream& out, const std::vector<ClusterReduction>& reductions) {
  out << "  {\n    const unsigned buffer = tn_exchanges & 1;\n"
      << "    float* slots = tn_exchange_slots[buffer];\n"
      << "    if (lane < CLUSTER) {  // thread `lane` pushes this CTA's totals to CTA `lane`\n";
  std::size_t offset = 0;
  for (const ClusterReduction& r : reductions) {
    for (std::size_t f = 0; f < exchange_floats(r); ++f) {
      out << "      tn::exchange_store(slots + " << offset + f << " * CLUSTER + tn_rank, lane, "
          << r.accumulator << (r.comoment ? std::string(".") + kComomentFields[f] : "") << ");\n";
    }
    offset += exchange_floats(r);
  }
  out << "      tn::exchange_arrive(&tn_exchange_barrier[buffer], lane);\n    }\n"
      << "    tn::exchange_wait(&tn_exchange_barrier[buffer], (tn_exchanges >> 1) & 1);\n"
      << "    ++tn_exchanges;\n";
  offset = 0;
  for (const ClusterReduction& r : reductions) {
    out << "    " << r.accumulator << " = "
        << (r.comoment ? std::string("tn::combine_comoment_slots<CLUSTER, ") +
                             (r.equal_counts ? "true>" : "false>")
                       : "tn::combine_slots<" + r.op + ", CLUSTER>")
        << "(slots + " << offset << " * CLUSTER);\n";
    offset += exchange_floats(r);
  }
  out << "  }\n";
}

void emit_exit_arrive(std::ostream& out) {
  out << "  tn::cluster_arrive();  // this CTA pushes nothing more into its peers\n";
}

void emit_exit_wait(std::ostream& out) {
  out << "  tn::cluster_wait();  // no peer pushes into this CTA after it exits\n";
}

}  // namespace tilenorm::codegen_sm90
