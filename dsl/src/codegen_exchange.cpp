#include "codegen_exchange.hpp"

namespace tilenorm::codegen_exchange {
namespace {

using codegen_sm90::exchange_floats;
using codegen_sm90::kComomentFields;
using codegen_sm90::phase_floats;

// Each row group of a CTA stores into, and combines from, its own run of slots.
std::string row_group_slots(const std::vector<ClusterReduction>& reductions, int rows_per_cta) {
  if (rows_per_cta == 1) return "";
  return " + row_in_cta * " + std::to_string(phase_floats(reductions)) + " * CLUSTER";
}

}  // namespace

std::size_t exchange_floats_per_cluster(int ctas, int rows_per_cta, std::size_t floats_per_phase,
                                        int buffers) {
  if (floats_per_phase == 0) return 0;
  const std::size_t slots =
      static_cast<std::size_t>(rows_per_cta) * floats_per_phase * static_cast<std::size_t>(ctas);
  return static_cast<std::size_t>(buffers) * (1 + slots);
}

void emit_prologue(std::ostream& out, int ctas, std::size_t floats_per_phase, int buffers) {
  out << "  constexpr int CLUSTER = " << ctas
      << ";  // consecutive CTAs that split each row (a software cluster)\n"
      << "  // A grid of whole clusters, all resident (a cooperative launch): else stop, rather\n"
      << "  // than wait for a peer that does not exist.\n"
      << "  if (gridDim.x % CLUSTER != 0) __trap();\n"
      << "  const unsigned tn_rank = blockIdx.x % CLUSTER;\n"
      << "  const long long tn_cluster = blockIdx.x / CLUSTER;\n"
      << "  const long long tn_clusters = gridDim.x / CLUSTER;\n";
  if (floats_per_phase == 0) return;
  // Buffers are reused in turn, as in the distributed-shared-memory exchange: a CTA stores into
  // a buffer again only after waiting on the exchange in between (two, or four for pipelined
  // kernels, which store one exchange ahead of their wait), which every CTA stores into only
  // after reading this one.
  out << "  constexpr int EXCHANGE_BUFFERS = " << buffers << ";\n"
      << "  constexpr int EXCHANGE_SLOTS = RPC * " << floats_per_phase
      << " * CLUSTER;  // floats of one buffer\n"
      << "  // Every cluster's arrival counts (zeroed by the runtime before the launch), then\n"
      << "  // every cluster's buffers.\n"
      << "  unsigned* const tn_exchange_counts =\n"
      << "      reinterpret_cast<unsigned*>(tn_exchange) + tn_cluster * EXCHANGE_BUFFERS;\n"
      << "  float* const tn_exchange_slots = tn_exchange + tn_clusters * EXCHANGE_BUFFERS +\n"
      << "                                   tn_cluster * EXCHANGE_BUFFERS * EXCHANGE_SLOTS;\n"
      << "  unsigned tn_pushes = 0, tn_waits = 0;  // exchanges stored and waited on so far\n";
}

void emit_exchange_push(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                        int rows_per_cta) {
  out << "  {\n    const unsigned buffer = tn_pushes % EXCHANGE_BUFFERS;\n"
      << "    float* slots = tn_exchange_slots + buffer * EXCHANGE_SLOTS"
      << row_group_slots(reductions, rows_per_cta) << ";\n"
      << "    if (lane == 0) {  // this row group's totals, at this CTA's rank\n";
  std::size_t offset = 0;
  for (const ClusterReduction& r : reductions) {
    for (std::size_t f = 0; f < exchange_floats(r); ++f) {
      out << "      tn::store_relaxed(slots + " << offset + f << " * CLUSTER + tn_rank, "
          << r.accumulator << (r.comoment ? std::string(".") + kComomentFields[f] : "") << ");\n";
    }
    offset += exchange_floats(r);
  }
  out << "      tn::add_release(&tn_exchange_counts[buffer], 1u);\n"
      << "    }\n    ++tn_pushes;\n  }\n";
}

void emit_exchange_combine(std::ostream& out, const std::vector<ClusterReduction>& reductions,
                           int rows_per_cta) {
  out << "  {\n    const unsigned buffer = tn_waits % EXCHANGE_BUFFERS;\n"
      << "    // This use of the buffer is complete once every row group of every CTA has "
         "counted.\n"
      << "    tn::exchange_wait_count(&tn_exchange_counts[buffer],\n"
      << "                            (tn_waits / EXCHANGE_BUFFERS + 1) * RPC * CLUSTER);\n"
      << "    ++tn_waits;\n"
      << "    const float* slots = tn_exchange_slots + buffer * EXCHANGE_SLOTS"
      << row_group_slots(reductions, rows_per_cta) << ";\n";
  std::size_t offset = 0;
  for (const ClusterReduction& r : reductions) {
    out << "    " << r.accumulator << " = "
        << (r.comoment ? std::string("tn::combine_comoment_global_slots<CLUSTER, ") + r.counts +
                             ", " + (r.variance ? "true>" : "false>")
                       : "tn::combine_global_slots<" + r.op + ", CLUSTER>")
        << "(slots + " << offset << " * CLUSTER);\n";
    offset += exchange_floats(r);
  }
  out << "  }\n";
}

}  // namespace tilenorm::codegen_exchange
