// tilenorm device prelude for sm_90 and later: thread-block clusters. Kernels that split a row
// across the CTAs of a cluster include it after the generic prelude. Each CTA reduces its slice
// of the row, then reads every CTA's partial through distributed shared memory (DSMEM), in
// rank order, so all CTAs of the cluster get the same bits without atomics.
namespace tn {

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

__device__ __forceinline__ unsigned cluster_ctas() {
  unsigned count;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(count));
  return count;
}

// Which cluster this CTA belongs to, and how many the grid has (clusters are 1-D along x).
__device__ __forceinline__ unsigned cluster_index() {
  unsigned index;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(index));
  return index;
}
__device__ __forceinline__ unsigned cluster_count() {
  unsigned count;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(count));
  return count;
}

// Every thread of every CTA in the cluster arrives and waits. Release/acquire order makes the
// shared-memory writes before it visible to the other CTAs' reads after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::
                   : "memory");
}

// Combines the float at `mine` (this CTA's shared memory) with the float at the same offset
// in every CTA of the cluster, in rank order 0 .. Count - 1.
template <int Op, int Count>
__device__ __forceinline__ float cluster_combine(const float* mine) {
  unsigned local;
  asm("{\n\t.reg .u64 generic;\n\tcvta.to.shared.u64 generic, %1;\n\tcvt.u32.u64 %0, generic;\n\t}"
      : "=r"(local)
      : "l"(mine));
  float total = 0.0f;
#pragma unroll
  for (int rank = 0; rank < Count; ++rank) {
    unsigned remote;
    float value;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(remote) : "memory");
    total = rank == 0 ? value : combine<Op>(total, value);
  }
  return total;
}

}  // namespace tn
