// tilenorm device prelude for sm_90 and later: thread-block clusters. Kernels that split a row
// across the CTAs of a cluster include it after the generic prelude.
//
// Row totals are exchanged by pushing: every CTA stores its partial into its own slot of every
// CTA's buffer (distributed shared memory) with st.async, which counts the bytes on that CTA's
// mbarrier; each CTA waits on its own mbarrier only, then adds the slots in rank order, so all
// CTAs get the same bits with one one-way latency instead of a cluster-wide barrier, and without
// atomics. No fence: a release at cluster scope (a remote mbarrier arrive, a cluster barrier)
// compiles to a GPU-scope memory barrier, which waits for every global load and store in flight,
// the next rows' prefetch included.
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

// The two halves of cluster_sync(), so that work can run between them: a CTA that has arrived
// may go on, and one that waits leaves only once every thread of the cluster has arrived.
// Release (arrive) and acquire (wait) are these instructions' defaults: spelled out they need
// PTX ISA 8.0 (NVRTC 12.0), left out 7.8 (NVRTC 11.8), and NVRTC 13.0 gives the same cubins.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// Every thread of every CTA in the cluster arrives and waits.
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// The address of the same shared-memory location in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned peer_address(const void* pointer, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(shared_address(pointer)), "r"(rank));
  return remote;
}

// One thread initializes the exchange's mbarriers, each completing when this CTA has announced
// the bytes of a phase (exchange_expect) and they have all landed; a cluster_sync() must follow
// before any CTA pushes into another.
__device__ __forceinline__ void exchange_init(unsigned long long* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The one arrival on this CTA's `barrier` for its current phase, which is complete once `bytes`
// have been pushed into it (bytes that land first are counted all the same).
__device__ __forceinline__ void exchange_expect(unsigned long long* barrier, unsigned bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)),
      "r"(bytes)
      : "memory");
}

// Stores `value` at `slot` (a location in this CTA's shared memory) in CTA `rank`, counting its
// 4 bytes on `barrier` there: a CTA that sees that barrier's phase complete sees the value.
__device__ __forceinline__ void exchange_push(float* slot, unsigned long long* barrier,
                                              unsigned rank, float value) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                   peer_address(slot, rank)),
               "r"(__float_as_uint(value)), "r"(peer_address(barrier, rank))
               : "memory");
}

// Waits until the phase of this CTA's `barrier` with this parity has completed.
__device__ __forceinline__ void exchange_wait(unsigned long long* barrier, unsigned parity) {
  const unsigned address = shared_address(barrier);
  unsigned done;
  do {
    asm volatile(
        "{\n\t.reg .pred ready;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, ready;\n\t}"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (!done);
}

// Combines Count slots in rank order.
template <int Op, int Count>
__device__ __forceinline__ float combine_slots(const float* slots) {
  float total = slots[0];
#pragma unroll
  for (int rank = 1; rank < Count; ++rank) total = combine<Op>(total, slots[rank]);
  return total;
}

// Combines Count co-moment states; field f of rank r is at slots[f * Count + r].
template <int Count, Counts C, bool Same = false>
__device__ __forceinline__ Comoment combine_comoment_slots(const float* slots) {
  return combine_comoment_states<Count, C, Same>(
      [&](int rank) { return load_comoment(slots + rank, Count); });
}

// Folding column partial sums: the CTAs of a cluster (one, when launched without clusters)
// add their partial sums in distributed shared memory, so that a cluster leaves one partial row
// in the workspace instead of one per CTA. See fold_columns_of() in the generic prelude.
__device__ __forceinline__ unsigned fold_ctas() {
  return cluster_ctas();
}
__device__ __forceinline__ unsigned fold_rank() {
  return cluster_rank();
}
// Every CTA of the cluster has written its partial sums (release), and sees its peers' (acquire).
// A release at cluster scope is a GPU-scope memory barrier (every thread waits for all its
// global stores) and the acquire invalidates the L1, so a CTA launched alone only needs its
// own barrier.
__device__ __forceinline__ void fold_sync() {
  if (cluster_ctas() == 1) {
    __syncthreads();
  } else {
    cluster_sync();
  }
}
// `slot` (a location in this CTA's shared memory) as CTA `rank` of the cluster holds it.
__device__ __forceinline__ float peer_load(const float* slot, unsigned rank) {
  float value;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(peer_address(slot, rank)));
  return value;
}
// The cluster sizes the runtime folds with (a power of two up to 8, the portable cluster size),
// each with its loads unrolled; without a cluster, the CTA's own shared memory. Another size
// would leave columns unwritten: stop.
template <int K, int Groups, int W, class Slot, class Store>
__device__ __forceinline__ void fold_columns(int first, int last, int step, Slot slot,
                                             Store store) {
  const auto peer = [](const float* p, int rank) { return peer_load(p, rank); };
  switch (cluster_ctas()) {
    case 2:
      return fold_columns_of<2, K, Groups, W>(first, last, step, peer, slot, store);
    case 4:
      return fold_columns_of<4, K, Groups, W>(first, last, step, peer, slot, store);
    case 8:
      return fold_columns_of<8, K, Groups, W>(first, last, step, peer, slot, store);
    case 1:
      return fold_columns_of<1, K, Groups, W>(first, last, step, OwnLoad{}, slot, store);
    default:
      __trap();
  }
}

}  // namespace tn
