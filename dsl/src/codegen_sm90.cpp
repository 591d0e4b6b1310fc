#include "codegen_sm90.hpp"

namespace tilenorm::codegen_sm90 {

std::size_t exchange_floats(const ClusterReduction& reduction) {
  return reduction.comoment ? std::size(kComomentFields) : 1;
}

std::size_t phase_floats(const std::vector<ClusterReduction>& reductions) {
  std::size_t floats = 0;
  for (const ClusterReduction& r : reductions) floats += exchange_floats(r);
  return floats;
}

void emit_prologue(std::ostream& out, int ctas, std::size_t floats_per_phase, int buffers) {
  out << "  constexpr int CLUSTER = " << ctas << ";  // CTAs that split each row\n"
      << "  // Launched without clusters of CLUSTER CTAs, the row totals would be wrong: stop.\n"
      << "  if (tn::cluster_ctas() != CLUSTER) __trap();\n"
      << "  const unsigned tn_rank = tn::cluster_rank();\n"
      << "  // Clusters are 1-D along x and the grid is a multiple of them.\n"
      << "  const long long tn_cluster = blockIdx.x / CLUSTER;\n"
      << "  const long long tn_clusters = gridDim.x / CLUSTER;\n";
  if (floats_per_phase == 0) return;
  // The buffers and their mbarriers are used in turn. With two, a CTA pushes into a buffer
  // again only two exchanges later, after waiting on the exchange in between, which every CTA
  // pushes into only once it has read this one. A pipelined kernel pushes one exchange ahead of
  // its wait, so it needs four: when a CTA pushes exchange k + 2 it has waited on exchange k,
  // so every CTA has pushed exchange k, which each does after reading exchange k - 2.
  out << "  constexpr int EXCHANGE_BUFFERS = " << buffers << ";\n"
      << "  __shared__ float tn_exchange_slots[EXCHANGE_BUFFERS][RPC * " << floats_per_phase
      << " * CLUSTER];\n"
      << "  __shared__ unsigned long long tn_exchange_barrier[EXCHANGE_BUFFERS];\n"
      << "  if (threadIdx.x == 0) {\n"
      << "    for (int b = 0; b < EXCHANGE_BUFFERS; ++b)\n"
      << "      tn::exchange_init(&tn_exchange_barrier[b]);\n"
      << "  }\n"
      << "  tn::cluster_sync();  // every mbarrier is ready before any CTA pushes into it\n"
      << "  unsigned tn_pushes = 0, tn_waits = 0;  // exchanges pushed and waited on so far\n";
}

// Each row group of a CTA with several pushes into, and combines from, its own run of slots.
std::string row_group_slots(const std::vector<ClusterReduction>& reductions, int rows_per_cta) {
  if (rows_per_cta == 1) return "";
  return " + row_in_cta * " + std::to_string(phase_floats(reductions)) + " * CLUSTER";
}

void emit_exchange_push(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                        int rows_per_cta) {
  const std::size_t floats = phase_floats(reductions);
  out << "  {\n    float* slots = tn_exchange_slots[tn_pushes % EXCHANGE_BUFFERS]"
      << row_group_slots(reductions, rows_per_cta) << ";\n"
      << "    unsigned long long* barrier = &tn_exchange_barrier[tn_pushes % EXCHANGE_BUFFERS];\n"
      << "    // One thread per CTA announces what its peers push into it.\n"
      << "    if (threadIdx.x == 0) tn::exchange_expect(barrier, RPC * " << floats
      << " * CLUSTER * sizeof(float));\n"
      << "    if (lane < CLUSTER) {  // thread `lane` pushes this CTA's totals to CTA `lane`\n";
  std::size_t offset = 0;
  for (const ClusterReduction& r : reductions) {
    for (std::size_t f = 0; f < exchange_floats(r); ++f) {
      out << "      tn::exchange_push(slots + " << offset + f
          << " * CLUSTER + tn_rank, barrier, lane, " << r.accumulator
          << (r.comoment ? std::string(".") + kComomentFields[f] : "") << ");\n";
    }
    offset += exchange_floats(r);
  }
  out << "    }\n    ++tn_pushes;\n  }\n";
}

void emit_exchange_combine(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                           int rows_per_cta) {
  out << "  {\n    const unsigned buffer = tn_waits % EXCHANGE_BUFFERS;\n"
      << "    tn::exchange_wait(&tn_exchange_barrier[buffer], (tn_waits / EXCHANGE_BUFFERS) & 1);\n"
      << "    ++tn_waits;\n"
      << "    const float* slots = tn_exchange_slots[buffer]"
      << row_group_slots(reductions, rows_per_cta) << ";\n";
  std::size_t offset = 0;
  for (const ClusterReduction& r : reductions) {
    out << "    " << r.accumulator << " = "
        << (r.comoment ? std::string("tn::combine_comoment_slots<CLUSTER, ") + r.counts + ", " +
                             (r.variance ? "true>" : "false>")
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
