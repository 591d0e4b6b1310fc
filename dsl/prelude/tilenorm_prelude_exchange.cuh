// tilenorm device prelude for software clusters (KernelSpec::global_exchange): the CTAs that
// split a row are ctas_per_row consecutive CTAs of a cooperative launch (all resident at once),
// and they exchange their row totals through global memory instead of distributed shared
// memory. Kernels that split rows that way include it after the generic prelude; sm_70 and
// later.
//
// Each CTA stores its totals into its own slots of the cluster's current buffer and adds its
// row groups to the buffer's arrival count with a release; each CTA waits until the count
// reaches every CTA's arrivals for that use of the buffer, acquires, and adds the slots in rank
// order, so all CTAs get the same bits. The runtime zeroes the counts before every launch.
namespace tn {

__device__ __forceinline__ unsigned load_acquire(const unsigned* count) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(count) : "memory");
  return value;
}

// Orders this thread's earlier stores (the slots) before the count that announces them.
__device__ __forceinline__ void add_release(unsigned* count, unsigned value) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(count), "r"(value) : "memory");
}

// From L2, where the peers' stores are: never a line an earlier use of the buffer left in L1.
__device__ __forceinline__ float load_relaxed(const float* slot) {
  float value;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(value) : "l"(slot) : "memory");
  return value;
}

__device__ __forceinline__ void store_relaxed(float* slot, float value) {
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(slot), "f"(value) : "memory");
}

// Waits until `count` reaches `target`: one lane per warp polls, then every thread acquires
// the count itself, so that its own loads of the slots come after the peers' stores.
__device__ __forceinline__ void exchange_wait_count(const unsigned* count, unsigned target) {
  if (threadIdx.x % 32 == 0) {
    while (load_acquire(count) < target) __nanosleep(64);
  }
  __syncwarp();
  while (load_acquire(count) < target) {
  }
}

// Combines Count slots in rank order.
template <int Op, int Count>
__device__ __forceinline__ float combine_global_slots(const float* slots) {
  float total = load_relaxed(slots);
#pragma unroll
  for (int rank = 1; rank < Count; ++rank) total = combine<Op>(total, load_relaxed(slots + rank));
  return total;
}

// Combines Count co-moment states; field f of rank r is at slots[f * Count + r].
template <int Count, Counts C, bool Same = false>
__device__ __forceinline__ Comoment combine_comoment_global_slots(const float* slots) {
  return combine_comoment_states<Count, C, Same>([&](int rank) {
    const float* fields = slots + rank;
    return Comoment{load_relaxed(fields), load_relaxed(fields + Count),
                    load_relaxed(fields + 2 * Count), load_relaxed(fields + 3 * Count)};
  });
}

}  // namespace tn
