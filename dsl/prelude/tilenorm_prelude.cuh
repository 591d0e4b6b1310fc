// tilenorm device prelude: generic helpers that generated kernels call. It holds no
// norm-specific code and includes no headers, so NVRTC compiles it as it is.
// Storage types are fp32, fp16 and bf16; all arithmetic is fp32.
namespace tn {

typedef unsigned short u16;
typedef unsigned int u32;

struct bf16 {
  u16 bits;
};
struct fp16 {
  u16 bits;
};

// ---- Conversions (round to nearest even, as the hardware instructions do).
__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(bf16 v) {
  return __uint_as_float(static_cast<u32>(v.bits) << 16);
}
__device__ __forceinline__ float to_float(fp16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <>
__device__ __forceinline__ fp16 from_float<fp16>(float v) {
  fp16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

// Rounds to a storage type's precision and back (the language's cast).
template <class T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

__device__ __forceinline__ float positive_infinity() {
  return __int_as_float(0x7f800000);
}
__device__ __forceinline__ float quiet_nan() {
  return __int_as_float(0x7fffffff);
}
__device__ __forceinline__ float sigmoid(float v) {
  return 1.0f / (1.0f + expf(-v));
}

template <int V>
__device__ __forceinline__ void zero(float (&values)[V]) {
#pragma unroll
  for (int v = 0; v < V; ++v) values[v] = 0.0f;
}

template <int I, int V>
__device__ __forceinline__ void zero2(float (&values)[I][V]) {
#pragma unroll
  for (int i = 0; i < I; ++i) zero(values[i]);
}

// The finishing kernel's V adjacent column sums (V = 4 only where `from` is 16-byte aligned):
// one vector load or store each.
template <int V>
__device__ __forceinline__ void add_partials(float (&sums)[V], const float* from) {
  if constexpr (V == 4) {
    const float4 v = *reinterpret_cast<const float4*>(from);
    sums[0] += v.x;
    sums[1] += v.y;
    sums[2] += v.z;
    sums[3] += v.w;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) sums[i] += from[i];
  }
}

template <int V>
__device__ __forceinline__ void store_partials(float* to, const float (&sums)[V]) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(to) = make_float4(sums[0], sums[1], sums[2], sums[3]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) to[i] = sums[i];
  }
}

// Adds the sums of the lane `offset` away (a butterfly step: both lanes get the same bits).
template <int V>
__device__ __forceinline__ void add_partials_of_lane(float (&sums)[V], int offset) {
#pragma unroll
  for (int i = 0; i < V; ++i) sums[i] += __shfl_xor_sync(0xffffffffu, sums[i], offset);
}

// ---- Vector memory access: a chunk of V consecutive elements moves as one access of
// V * sizeof(T) bytes (up to 16). The caller guarantees that alignment.
template <int Bytes>
struct RawVector;
template <>
struct RawVector<2> {
  typedef u16 type;
};
template <>
struct RawVector<4> {
  typedef u32 type;
};
template <>
struct RawVector<8> {
  typedef uint2 type;
};
template <>
struct RawVector<16> {
  typedef uint4 type;
};

template <class T, int V>
union Chunk {
  typename RawVector<sizeof(T) * V>::type raw;
  T element[V];
};

// Both elements of a 32-bit word of 16-bit values in fp32, low (lower address) first. bf16: the
// low element is the word shifted left and the high one the word masked, one instruction each
// (element by element, the high one is extracted and then shifted: two).
__device__ __forceinline__ void unpack_word(bf16, u32 word, float& low, float& high) {
  low = __uint_as_float(word << 16);
  high = __uint_as_float(word & 0xffff0000u);
}
// fp16: both halves converted straight from the word's register, in one asm block. Taken element
// by element through the union, each half sat in a 32-bit register of its own, so a row kept raw
// took twice the registers of bf16's (LayerNorm fp16 N = 12344: 127 against 79). A kernel may
// define TN_FP16_UNPACK_ASM 0 before the prelude to convert each half on its own instead, which
// ptxas schedules differently (see the code generator: cluster kernels).
#ifndef TN_FP16_UNPACK_ASM
#define TN_FP16_UNPACK_ASM 1
#endif
__device__ __forceinline__ void unpack_word(fp16, u32 word, float& low, float& high) {
#if TN_FP16_UNPACK_ASM
  asm("{\n\t.reg .f16 low, high;\n\tmov.b32 {low, high}, %2;\n\tcvt.f32.f16 %0, low;\n\t"
      "cvt.f32.f16 %1, high;\n\t}"
      : "=f"(low), "=f"(high)
      : "r"(word));
#else
  low = to_float(fp16{static_cast<u16>(word)});
  high = to_float(fp16{static_cast<u16>(word >> 16)});
#endif
}

// Whether 16-bit chunks unpack a 32-bit word at a time (unpack_elements); a kernel may define it
// 0 before the prelude.
#ifndef TN_UNPACK_WORDS
#define TN_UNPACK_WORDS 1
#endif

// A chunk's elements in fp32; 16-bit pairs a 32-bit word at a time (unpack_word).
template <class T, int V>
__device__ __forceinline__ void unpack_elements(const Chunk<T, V>& c, float (&out)[V]) {
  if constexpr (TN_UNPACK_WORDS && sizeof(T) == 2 && V % 2 == 0) {
    union {
      typename RawVector<sizeof(T) * V>::type raw;
      u32 word[V / 2];
    } words;
    words.raw = c.raw;
#pragma unroll
    for (int i = 0; i < V / 2; ++i) unpack_word(T{}, words.word[i], out[2 * i], out[2 * i + 1]);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = to_float(c.element[v]);
  }
}

// Whether the chunk of V columns from col0 lies inside a row of N. Chunks start at multiples
// of V (the peeled ones, which do not, have their own functions), so where V divides N a chunk
// that starts inside the row ends inside it: the test is then the one the generated code has
// made before the call (c0 < N), and the compiler drops the element-by-element path.
template <int V, int N>
__device__ __forceinline__ bool whole_chunk(int col0) {
  return N % V == 0 ? col0 < N : col0 + V <= N;
}

// A chunk's first column that the generator knows lies inside the row: the threads' chunks tile
// it exactly. Said to the compiler, it folds away the chunk tests of the loads and stores
// (whole_chunk), which it cannot prove from a cluster rank.
template <int N>
__device__ __forceinline__ int column_inside(int col0) {
  __builtin_assume(col0 >= 0 && col0 < N);
  return col0;
}

// ---- L2 priority of rows read more than once from global memory (global row storage). The
// reduction passes ask L2 to keep the row, so that the output pass re-reads it from L2 rather
// than DRAM; the output pass lets it go first. Without the hints, the outputs written in
// between push rows out of L2 before their second read.
enum L2Priority { kL2Normal = 0, kL2Keep = 1, kL2Release = 2 };

template <int Priority>
__device__ __forceinline__ unsigned long long l2_policy() {
  unsigned long long policy;
  if (Priority == kL2Keep)
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  else
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void load_with_policy(const uint4* from, unsigned long long policy,
                                                 uint4& to) {
  asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(to.x), "=r"(to.y), "=r"(to.z), "=r"(to.w)
      : "l"(from), "l"(policy));
}
__device__ __forceinline__ void load_with_policy(const uint2* from, unsigned long long policy,
                                                 uint2& to) {
  asm("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
      : "=r"(to.x), "=r"(to.y)
      : "l"(from), "l"(policy));
}
__device__ __forceinline__ void load_with_policy(const u32* from, unsigned long long policy,
                                                 u32& to) {
  asm("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(to) : "l"(from), "l"(policy));
}
__device__ __forceinline__ void load_with_policy(const u16* from, unsigned long long policy,
                                                 u16& to) {
  asm("ld.global.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(to) : "l"(from), "l"(policy));
}

// One aligned vector of raw storage, with the L2 priority asked for.
template <int Priority, class Raw>
__device__ __forceinline__ Raw load_raw(const Raw* from) {
  if constexpr (Priority == kL2Normal) {
    return *from;
  } else {
    Raw raw;
    load_with_policy(from, l2_policy<Priority>(), raw);
    return raw;
  }
}

// Loads elements [col0, col0 + V) of a row of N into fp32. Columns past N read as 0; a
// chunk that crosses N is read element by element so nothing past the row is touched.
template <class T, int V, int N, int Priority = kL2Normal>
__device__ __forceinline__ void load_chunk(const T* row, int col0, float (&out)[V]) {
  if (whole_chunk<V, N>(col0)) {
    Chunk<T, V> c;
    c.raw = load_raw<Priority>(
        reinterpret_cast<const typename RawVector<sizeof(T) * V>::type*>(row + col0));
    unpack_elements(c, out);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = col0 + v < N ? to_float(row[col0 + v]) : 0.0f;
  }
}

// The raw storage of elements [col0, col0 + V) of a row of N (columns past N read as 0), to be
// converted later with unpack_chunk: a prefetch that does not wait for its data.
template <class T, int V, int N>
__device__ __forceinline__ typename RawVector<sizeof(T) * V>::type fetch_chunk(const T* row,
                                                                               int col0) {
  Chunk<T, V> c;
  if (whole_chunk<V, N>(col0)) {
    c.raw = *reinterpret_cast<const typename RawVector<sizeof(T) * V>::type*>(row + col0);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) c.element[v] = col0 + v < N ? row[col0 + v] : from_float<T>(0.0f);
  }
  return c.raw;
}

// The bits of a raw chunk folded into one word (see pin_loads in the code generator).
__device__ __forceinline__ unsigned raw_bits(u16 raw) {
  return raw;
}
__device__ __forceinline__ unsigned raw_bits(u32 raw) {
  return raw;
}
__device__ __forceinline__ unsigned raw_bits(uint2 raw) {
  return raw.x ^ raw.y;
}
__device__ __forceinline__ unsigned raw_bits(uint4 raw) {
  return raw.x ^ raw.y ^ raw.z ^ raw.w;
}

template <class T, int V>
__device__ __forceinline__ typename RawVector<sizeof(T) * V>::type raw_zero() {
  Chunk<T, V> c;
#pragma unroll
  for (int v = 0; v < V; ++v) c.element[v] = from_float<T>(0.0f);
  return c.raw;
}

// The 32-bit shared-window address of a pointer into shared memory.
__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  unsigned address;
  asm("{\n\t.reg .u64 generic;\n\tcvta.to.shared.u64 generic, %1;\n\tcvt.u32.u64 %0, generic;\n\t}"
      : "=r"(address)
      : "l"(pointer));
  return address;
}

// The same address for a cp.async's destination, through the intrinsic, which ptxas sees
// through: it folds a staging slot's address into a base register and a constant offset, where
// the opaque cvta above took a register per slot (a staged cluster slice's sixteen copies spilled
// 208-328 bytes per thread, NVRTC 13.0, sm_90). Not used for every shared address: in the
// recomputing fp32 RMSNorm backward that moved ptxas's allocation from 0 to 28 bytes spilled.
__device__ __forceinline__ unsigned stage_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// Starts an asynchronous copy (cp.async, sm_80+) of elements [col0, col0 + V) of a row of N
// into `stage` in shared memory, without waiting: columns past N, and everything when `valid`
// is false, are filled with zeros, and nothing past the row is read. Bytes is V * sizeof(T):
// 4, 8 or 16 (16-byte copies bypass L1).
template <class T, int V, int N>
__device__ __forceinline__ void copy_chunk_async(typename RawVector<sizeof(T) * V>::type* stage,
                                                 const T* row, int col0, bool valid) {
  constexpr int kBytes = sizeof(T) * V;
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const int columns = valid ? (whole_chunk<V, N>(col0) ? V : (col0 < N ? N - col0 : 0)) : 0;
  const T* source = columns > 0 ? row + col0 : row;
  const unsigned bytes = static_cast<unsigned>(columns * static_cast<int>(sizeof(T)));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(stage_address(stage)),
                 "l"(source), "r"(bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(stage_address(stage)),
                 "l"(source), "n"(kBytes), "r"(bytes)
                 : "memory");
  }
}

// Starts an asynchronous copy (cp.async, sm_80+) of values[index] into `slot` in shared memory,
// without waiting; a zero where `valid` is false (nothing is read then).
__device__ __forceinline__ void copy_scalar_async(float* slot, const float* values, long long index,
                                                  bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(shared_address(slot)),
               "l"(valid ? values + index : values), "r"(valid ? 4u : 0u)
               : "memory");
}

// Programmatic dependent launch (sm_90 and later): launched with the runtime's
// programmatic_launch, a kernel may be scheduled while the previous one in its stream is still
// running. It waits here, before it touches global memory, until that kernel has finished and
// its writes are visible. Launched without it, this does nothing.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next launch in the stream be scheduled once every CTA of this grid has called this
// (or exited); it waits for this grid in wait_for_previous_grid. Launched without programmatic
// dependent launch, this does nothing.
__device__ __forceinline__ void release_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits for this thread's asynchronous copies (each thread reads back only what it copied).
__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

template <class T, int V>
__device__ __forceinline__ void unpack_chunk(typename RawVector<sizeof(T) * V>::type raw,
                                             float (&out)[V]) {
  Chunk<T, V> c;
  c.raw = raw;
  unpack_elements(c, out);
}

// As load_chunk, and also keeps the raw chunk in `stash` (shared memory, laid out like the
// row) so that later passes over the row read it from there instead of global memory.
template <class T, int V, int N>
__device__ __forceinline__ void load_chunk_and_stash(const T* row, T* stash, int col0,
                                                     float (&out)[V]) {
  typedef typename RawVector<sizeof(T) * V>::type Raw;
  Chunk<T, V> c;
  if (whole_chunk<V, N>(col0)) {
    c.raw = *reinterpret_cast<const Raw*>(row + col0);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) c.element[v] = col0 + v < N ? row[col0 + v] : from_float<T>(0.0f);
  }
  *reinterpret_cast<Raw*>(stash + col0) = c.raw;
  unpack_elements(c, out);
}

// Stores elements [col0, min(col0 + V, N)) of a row.
template <class T, int V, int N>
__device__ __forceinline__ void store_chunk(T* row, int col0, const float (&in)[V]) {
  Chunk<T, V> c;
#pragma unroll
  for (int v = 0; v < V; ++v) c.element[v] = from_float<T>(in[v]);
  if (whole_chunk<V, N>(col0)) {
    *reinterpret_cast<typename RawVector<sizeof(T) * V>::type*>(row + col0) = c.raw;
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (col0 + v < N) row[col0 + v] = c.element[v];
    }
  }
}

// ---- Peeled rows (KernelSpec::peel_rows). A row may start at any element. Its body is the
// whole vectors from its first V-aligned column `head` on, which move as vectors; the caller
// has checked that a body chunk lies in the row. What is left, the remainder, is at most
// 2 * (V - 1) columns: the head's, before column `head`, and the tail's, after the last whole
// vector. They move one element per thread (remainder_column), so that no warp takes a sweep
// of element-by-element chunks for them.

// The column of a peeled row's remainder element k (k >= 0): the head's columns [0, head)
// come first, then the tail's; N where k is past them.
template <int V, int N>
__device__ __forceinline__ int remainder_column(int k, int head) {
  const int body_end = head + (N > head ? (N - head) / V * V : 0);
  const int column = k < head ? k : body_end + (k - head);
  return column < N ? column : N;
}

// ---- Rows at every shift in one grid (a kernel that sums across rows, with shift_per_row).
// Rows r and r + period start at the same shift, so the rows split into `period` classes, r %
// period. Each row block (a CTA, or a cluster) walks its own contiguous range of the rows in
// class-major order (class 0's rows first, each class in row order), a class at a time, and
// writes the column partial sums of each class it meets to a partial row of their own.
// tilenorm::class_major_slots (runtime/src/alignment.cpp) counts the partial rows that takes,
// with the same arithmetic.

// The period, in rows, of the shifts of rows `stride` elements apart, peeled at VEC: VEC over
// the largest power of two up to VEC that divides the stride.
template <int VEC>
__device__ __forceinline__ int shift_period(long long stride) {
  int common = 1;
  while (common < VEC && (static_cast<unsigned long long>(stride) & (2ull * common - 1)) == 0)
    common *= 2;
  return VEC / common;
}

// The rows of class c: classes below rows % period hold rows / period + 1, the others
// rows / period.
__device__ __forceinline__ long long class_rows(int c, long long rows, int period) {
  return rows / period + (c < rows % period ? 1 : 0);
}

// The class-major position of class c's first row.
__device__ __forceinline__ long long class_first(int c, long long rows, int period) {
  const long long extra = rows % period;
  return c * (rows / period) + (c < extra ? c : extra);
}

// The class of the q-th row in class-major order (0 <= q < rows).
__device__ __forceinline__ int row_class(long long q, long long rows, int period) {
  const long long base = rows / period, extra = rows % period;
  const long long long_rows = extra * (base + 1);  // the rows of the longer classes
  return static_cast<int>(q < long_rows ? q / (base + 1) : extra + (q - long_rows) / base);
}

// Elements [col0, col0 + V) of a row or column parameter, which need not be aligned, element
// by element, with zeros outside [0, N): the copy of a column parameter a CTA makes once, and
// column chunks at the parameter's edges.
template <class T, int V, int N>
__device__ __forceinline__ typename RawVector<sizeof(T) * V>::type gather_chunk(const T* data,
                                                                                int col0) {
  Chunk<T, V> c;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int col = col0 + v;
    c.element[v] = col >= 0 && col < N ? data[col] : from_float<T>(0.0f);
  }
  return c.raw;
}

// A body chunk of a peeled row: aligned, and inside the row.
template <class T, int V, int Priority = kL2Normal>
__device__ __forceinline__ typename RawVector<sizeof(T) * V>::type fetch_chunk_peeled(const T* row,
                                                                                      int col0) {
  return load_raw<Priority>(
      reinterpret_cast<const typename RawVector<sizeof(T) * V>::type*>(row + col0));
}

template <class T, int V, int Priority = kL2Normal>
__device__ __forceinline__ void load_chunk_peeled(const T* row, int col0, float (&out)[V]) {
  unpack_chunk<T, V>(fetch_chunk_peeled<T, V, Priority>(row, col0), out);
}

// As load_chunk_peeled, and also keeps the chunk at `stash`, its slot's place in the
// shared-memory stash.
template <class T, int V>
__device__ __forceinline__ void load_chunk_and_stash_peeled(const T* row, T* stash, int col0,
                                                            float (&out)[V]) {
  typedef typename RawVector<sizeof(T) * V>::type Raw;
  const Raw raw = fetch_chunk_peeled<T, V>(row, col0);
  *reinterpret_cast<Raw*>(stash) = raw;
  unpack_chunk<T, V>(raw, out);
}

// A chunk that load_chunk_and_stash_peeled kept at `stash`.
template <class T, int V>
__device__ __forceinline__ void load_stashed_chunk(const T* stash, float (&out)[V]) {
  unpack_chunk<T, V>(*reinterpret_cast<const typename RawVector<sizeof(T) * V>::type*>(stash), out);
}

// Stores a body chunk of a peeled row at col0.
template <class T, int V>
__device__ __forceinline__ void store_chunk_peeled(T* row, int col0, const float (&in)[V]) {
  Chunk<T, V> c;
#pragma unroll
  for (int v = 0; v < V; ++v) c.element[v] = from_float<T>(in[v]);
  *reinterpret_cast<typename RawVector<sizeof(T) * V>::type*>(row + col0) = c.raw;
}

// A remainder element of a row input, raw (converted where a pass reads it, so that a
// prefetch does not wait for its data), or zero where `column` is N (none).
template <class T, int N>
__device__ __forceinline__ T fetch_remainder(const T* row, int column) {
  return column < N ? row[column] : from_float<T>(0.0f);
}

// The sizeof(Raw) bytes that start `shift` bytes into the pair lo, hi (lo at the lower
// address): a barrel shifter over 32-bit words (selects), then one funnel shift per word for
// the bytes within a word. Nothing is indexed at run time, which would put the words in local
// memory.
template <class Raw>
__device__ __forceinline__ Raw funnel_bytes(Raw lo, Raw hi, int shift) {
  constexpr int W = sizeof(Raw) / 4;
  union Words {
    Raw raw;
    u32 w[W];
  };
  Words a, b, r;
  a.raw = lo;
  b.raw = hi;
  u32 w[2 * W];
#pragma unroll
  for (int k = 0; k < W; ++k) {
    w[k] = a.w[k];
    w[W + k] = b.w[k];
  }
  const int word = shift / 4;  // < W
#pragma unroll
  for (int step = W / 2; step >= 1; step /= 2) {
#pragma unroll
    for (int k = 0; k + step < 2 * W; ++k) w[k] = (word & step) != 0 ? w[k + step] : w[k];
  }
  const unsigned bits = static_cast<unsigned>(shift % 4) * 8;
#pragma unroll
  for (int j = 0; j < W; ++j)
    r.w[j] = static_cast<u32>(((static_cast<unsigned long long>(w[j + 1]) << 32) | w[j]) >> bits);
  return r.raw;
}

// The copy of a column parameter that each peeled row reads at its own shift (shift_per_row in
// the code generator), at no shift and word-major: word w of chunk k of sweep `it` (TPR + 1
// chunks per sweep, the last the one after the sweep's) at ((it * W + w) * (TPR + 1) + k). The
// threads of a warp then read the same word of consecutive chunks, in consecutive banks,
// whatever the row's shift: a shifted chunk takes its W words (W + 1 for 16-bit elements at an
// odd shift, funnel-shifted by half a word) in one bank-conflict-free read each. Laid out
// chunk-major, a chunk was either two aligned vectors and a barrel of selects (LayerNorm bf16
// N = 131071: 50.6 M instructions against 38.1 M at one shift per thread) or its words read
// 4-way conflicted, which measured slower still (N = 262143 69.7 -> 60.8% of the copy in bf16,
// 85.2 -> 70.7% in fp32; H200, thirty-third session). Word-major against two vectors and
// selects (thirty-fourth session, each row at its own shift): LayerNorm bf16 N = 65537 75.3 ->
// 78.9%, 131071 71.3 -> 75.0%, 262143 69.3 -> 75.1%; RMSNorm and fp32 within -0.1 to +1.0.
template <class T, int V, int TPR>
__device__ __forceinline__ void store_stash_chunk_words(
    T* stash, int it, int k, typename RawVector<sizeof(T) * V>::type raw) {
  typedef typename RawVector<sizeof(T) * V>::type Raw;
  static_assert(sizeof(Raw) >= 4 && sizeof(T) <= 4, "whole 32-bit words");
  constexpr int W = static_cast<int>(sizeof(Raw) / 4);
  union {
    Raw raw;
    u32 w[W];
  } c;
  c.raw = raw;
  u32* words = reinterpret_cast<u32*>(stash) + it * W * (TPR + 1) + k;
#pragma unroll
  for (int w = 0; w < W; ++w) words[w * (TPR + 1)] = c.w[w];
}

// Thread `lane`'s chunk of sweep `it`, `shift` elements on, from a word-major copy
// (store_stash_chunk_words). Where each word lies depends on the row's shift only, so the
// offsets are the same for every chunk of a row.
template <class T, int V, int TPR>
__device__ __forceinline__ void load_stashed_chunk_shifted(const T* stash, int it, int lane,
                                                           int shift, float (&out)[V]) {
  typedef typename RawVector<sizeof(T) * V>::type Raw;
  static_assert(sizeof(Raw) >= 4 && sizeof(T) <= 4, "whole 32-bit words");
  constexpr int W = static_cast<int>(sizeof(Raw) / 4);  // words in a chunk
  constexpr int E = 4 / static_cast<int>(sizeof(T));    // elements in a word
  const u32* words = reinterpret_cast<const u32*>(stash) + it * W * (TPR + 1) + lane;
  const int first = shift / E;  // < W: the word the chunk starts in, within this thread's chunk
  // Word `first + j` of this thread's chunk, past its end in the next chunk.
  auto word = [&](int j) {
    const int g = first + j;
    return words[(g % W) * (TPR + 1) + g / W];
  };
  union {
    Raw raw;
    u32 w[W];
  } c;
  if constexpr (E == 1) {
#pragma unroll
    for (int j = 0; j < W; ++j) c.w[j] = word(j);
  } else {
    static_assert(E == 2, "16-bit or 32-bit elements");
    u32 w[W + 1];
#pragma unroll
    for (int j = 0; j <= W; ++j) w[j] = word(j);
    const unsigned bits = static_cast<unsigned>(shift % 2) * 16u;
#pragma unroll
    for (int j = 0; j < W; ++j) c.w[j] = __funnelshift_r(w[j], w[j + 1], bits);
  }
  unpack_chunk<T, V>(c.raw, out);
}

// Elements [col0, col0 + V) of a column parameter (contiguous [N], any element alignment) for
// a body chunk of a peeled row. A body chunk is
// aligned in the row, so generally not in the parameter (the row's misalignment changes from
// row to row).
// - 16-bit types: the V / 2 + 1 words that cover the chunk, shifted by half a word where the
//   chunk starts mid-word (one funnel shift per word). Extracting the chunk from two aligned
//   vectors with a barrel of selects (as for 32-bit types) took about 27 instructions per chunk
//   and parameter where this takes 10 (LayerNorm bf16 N = 4097: 77.6 M -> 68.8 M instructions,
//   twentieth session); 16-bit elements one by one would touch as many cache lines per load as
//   the row's own vector load. The loads take no branch, so that ptxas issues them together
//   with the other chunks' loads: the last word is read as its low half (the only half the
//   shift uses), which stays inside the parameter where the chunk ends at N, and the first is
//   tested only where the chunk may start at column 0 (`interior` is false: known when the
//   kernel is generated).
// - 32-bit types: the two aligned vectors around the chunk, and the selects (whole words).
//   Loaded as words they measured no faster (fp32 N = 12345: 94.4 -> 92.9% of the copy).
//   Both vectors are loaded also when the chunk happens to be aligned: one path after the
//   loads keeps the unrolled passes within their registers, where a conditional load or a
//   separate element-wise path made ptxas spill.
template <class T, int V, int N>
__device__ __forceinline__ void load_column_chunk_peeled(const T* column, int col0, float (&out)[V],
                                                         [[maybe_unused]] bool interior) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "column parameters of 16 or 32 bits");
  typedef typename RawVector<sizeof(T) * V>::type Raw;
  Chunk<T, V> c;
  if constexpr (sizeof(T) == 4) {
    // Elements of the aligned vector holding column col0 that come before it.
    const int lead =
        static_cast<int>((reinterpret_cast<unsigned long long>(column) / sizeof(T) +
                          static_cast<unsigned long long>(static_cast<long long>(col0))) %
                         V);
    const int base = col0 - lead;  // the column that aligned vector starts at
    Chunk<T, V> lo, hi;
    if (base >= 0 && base + 2 * V <= N) {
      const Raw* vectors = reinterpret_cast<const Raw*>(column + base);
      lo.raw = vectors[0];
      hi.raw = vectors[1];
    } else {
      lo.raw = gather_chunk<T, V, N>(column, base);
      hi.raw = gather_chunk<T, V, N>(column, base + V);
    }
    c.raw = funnel_bytes(lo.raw, hi.raw, lead * static_cast<int>(sizeof(T)));
  } else if constexpr (V == 1) {
    c.raw = gather_chunk<T, V, N>(column, col0);
  } else {
    constexpr int W = V / 2;  // words in the chunk
    // Whether the chunk starts in the upper half of a word.
    const int odd =
        static_cast<int>((static_cast<unsigned>(reinterpret_cast<unsigned long long>(column) / 2) +
                          static_cast<unsigned>(col0)) %
                         2u);
    const u32* words = reinterpret_cast<const u32*>(column + col0 - odd);
    u32 w[W + 1];
    // The first word starts before the parameter only at its column 0, where that column is
    // the word's upper half, the only half the shift keeps.
    w[0] = interior || col0 >= odd
               ? __ldg(words)
               : static_cast<u32>(__ldg(reinterpret_cast<const unsigned short*>(column))) << 16;
#pragma unroll
    for (int k = 1; k < W; ++k) w[k] = __ldg(words + k);
    w[W] = __ldg(reinterpret_cast<const unsigned short*>(column + col0 + V - 1));
    union {
      Raw raw;
      u32 w[W];
    } shifted;
#pragma unroll
    for (int k = 0; k < W; ++k) shifted.w[k] = __funnelshift_r(w[k], w[k + 1], 16 * odd);
    c.raw = shifted.raw;
  }
  unpack_chunk<T, V>(c.raw, out);
}

// ---- Reductions.
enum ReduceOp { kSum = 0, kMax = 1, kMin = 2, kComoment = 3 };

template <int Op>
__device__ __forceinline__ float combine(float a, float b) {
  return Op == kSum ? a + b : (Op == kMax ? fmaxf(a, b) : fminf(a, b));
}

template <int Op>
__device__ __forceinline__ float identity() {
  return Op == kSum ? 0.0f : (Op == kMax ? -positive_infinity() : positive_infinity());
}

// A thread accumulates a reduction into L independent lanes (column v into lane v % L), so
// that its adds form L short chains instead of one chain as long as its columns, and folds
// them pairwise at the end of the pass.
template <int Op, int L>
__device__ __forceinline__ void fill_identity(float (&lanes)[L]) {
#pragma unroll
  for (int l = 0; l < L; ++l) lanes[l] = identity<Op>();
}

template <int Op, int L>
__device__ __forceinline__ float fold_lanes(const float (&lanes)[L]) {
  static_assert(L == 2 || L == 4, "two or four lanes");
  if constexpr (L == 2)
    return combine<Op>(lanes[0], lanes[1]);
  else
    return combine<Op>(combine<Op>(lanes[0], lanes[1]), combine<Op>(lanes[2], lanes[3]));
}

// All-reduce across aligned groups of Width lanes of a warp (Width a power of two <= 32).
template <int Op, int Width>
__device__ __forceinline__ float group_allreduce(float v) {
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2)
    v = combine<Op>(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Combines `count` per-warp partials stored `stride` floats apart in shared memory.
template <int Op, int Count>
__device__ __forceinline__ float combine_partials(const float* partials, int stride) {
  float v = partials[0];
#pragma unroll
  for (int i = 1; i < Count; ++i) v = combine<Op>(v, partials[i * stride]);
  return v;
}

// ---- Co-moments: sum((a - avg(a)) * (b - avg(b))) along a row in one phase. Each thread
// centers its own columns around their averages (two passes over values it holds), and the
// row combines the threads' states, each the count of its columns, their two averages and
// their centered sum, exactly (pairwise by the update of Chan, Golub and LeVeque, or, with
// equal counts, around one lane's averages; comoment_allreduce): nothing waits for the row's
// average before centering, and the sum is as well conditioned as the two-pass one.
struct Comoment {
  float n, avg_a, avg_b, c;
};

__device__ __forceinline__ Comoment comoment_identity() {
  return {0.0f, 0.0f, 0.0f, 0.0f};
}

// What the code generator knows of the counts of the states a row combines: all equal (every
// thread holds the same number of columns: one butterfly around a shared shift, with no
// division), all positive (every thread holds a column: no test for empty states), or any.
enum class Counts { equal, positive, any };

// Symmetric bit for bit (explicit roundings: an FMA would depend on the operand order), so
// every lane of a butterfly ends with the same state. Same: a variance (both operands one
// tile), whose two averages are one.
template <Counts C, bool Same = false>
__device__ __forceinline__ Comoment combine_comoments(const Comoment& x, const Comoment& y) {
  const float da = __fsub_rn(y.avg_a, x.avg_a);
  const float db = Same ? da : __fsub_rn(y.avg_b, x.avg_b);
  Comoment r;
  r.n = __fadd_rn(x.n, y.n);
  if (C == Counts::any && y.n == 0.0f) return x;
  if (C == Counts::any && x.n == 0.0f) return y;
  const float inv = __fdividef(1.0f, r.n);  // no slow path: a count is a positive integer <= N
  const float wx = __fmul_rn(x.n, inv), wy = __fmul_rn(y.n, inv);
  r.avg_a = __fadd_rn(__fmul_rn(x.avg_a, wx), __fmul_rn(y.avg_a, wy));
  r.avg_b = Same ? r.avg_a : __fadd_rn(__fmul_rn(x.avg_b, wx), __fmul_rn(y.avg_b, wy));
  r.c = __fadd_rn(__fadd_rn(x.c, y.c),
                  __fmul_rn(__fmul_rn(da, db), __fmul_rn(__fmul_rn(x.n, y.n), inv)));
  return r;
}

// With equal counts every lane moves its centered sum onto one shift, the first lane's averages
// (one shuffle): c + n da db, with da = avg_a - shift_a. A single butterfly sums those and the
// offsets da and db side by side. The group's averages are the shift plus the offsets' average,
// and its centered sum is the moved total less n_group times the product of those averages. The
// offsets are as small as the lanes' averages differ, so the subtraction keeps the two-pass
// sum's precision, and a warp waits on six shuffles instead of ten. Otherwise the pairwise
// combine, shuffling only what differs between the lanes (with Same, the second average is the
// first).
template <int Width, Counts C, bool Same = false>
__device__ __forceinline__ Comoment comoment_allreduce(Comoment s) {
  if constexpr (C == Counts::equal) {
    constexpr float kShare = 1.0f / static_cast<float>(Width);  // exact: Width is a power of 2
    const float shift_a = __shfl_sync(0xffffffffu, s.avg_a, 0, Width);
    const float shift_b = Same ? shift_a : __shfl_sync(0xffffffffu, s.avg_b, 0, Width);
    float da = s.avg_a - shift_a;
    float db = Same ? da : s.avg_b - shift_b;
    float moved = s.c + s.n * (da * db);
#pragma unroll
    for (int partner = Width / 2; partner > 0; partner /= 2) {
      moved += __shfl_xor_sync(0xffffffffu, moved, partner);
      da += __shfl_xor_sync(0xffffffffu, da, partner);
      if constexpr (!Same) db += __shfl_xor_sync(0xffffffffu, db, partner);
    }
    const float avg_offset_a = da * kShare;
    const float avg_offset_b = Same ? avg_offset_a : db * kShare;
    Comoment r;
    r.n = s.n * static_cast<float>(Width);
    r.avg_a = shift_a + avg_offset_a;
    r.avg_b = Same ? r.avg_a : shift_b + avg_offset_b;
    r.c = moved - r.n * (avg_offset_a * avg_offset_b);
    if constexpr (Same) r.c = fmaxf(r.c, 0.0f);  // a variance: rounding must not make it negative
    return r;
  }
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) {
    Comoment other;
    other.n = __shfl_xor_sync(0xffffffffu, s.n, offset);
    other.avg_a = __shfl_xor_sync(0xffffffffu, s.avg_a, offset);
    other.avg_b = Same ? other.avg_a : __shfl_xor_sync(0xffffffffu, s.avg_b, offset);
    other.c = __shfl_xor_sync(0xffffffffu, s.c, offset);
    s = combine_comoments<C, Same>(s, other);
  }
  return s;
}

// The fields of a state stored `field_stride` floats apart.
__device__ __forceinline__ Comoment load_comoment(const float* fields, int field_stride) {
  return {fields[0], fields[field_stride], fields[2 * field_stride], fields[3 * field_stride]};
}

// Combines Count states (at most 32) that every lane can load: lane i loads state i % Width,
// Width the smallest power of two >= Count, and a butterfly over groups of Width lanes leaves
// every lane with the total, log2(Width) combines deep. With Count a power of two the pairs
// have equal counts at every level; otherwise (a cluster of 3, 5, 6, ... CTAs) the lanes past
// Count load the empty state, which takes any counts' combine.
__host__ __device__ constexpr int butterfly_width(int count) {
  int width = 1;
  while (width < count) width *= 2;
  return width;
}
template <int Count, Counts C, bool Same, class Load>
__device__ __forceinline__ Comoment combine_comoment_states(Load state) {
  static_assert(Count >= 1 && Count <= 32, "at most a warp of states");
  constexpr int Width = butterfly_width(Count);
  const int i = static_cast<int>(threadIdx.x % 32) % Width;
  if constexpr (Width == Count) {
    return comoment_allreduce<Count, C, Same>(state(i));
  } else {
    return comoment_allreduce<Width, Counts::any, Same>(i < Count ? state(i) : comoment_identity());
  }
}

// Combines `Count` per-warp states, each stored as consecutive fields, `stride` floats apart.
template <int Count, Counts C, bool Same = false>
__device__ __forceinline__ Comoment combine_comoment_partials(const float* partials, int stride) {
  return combine_comoment_states<Count, C, Same>(
      [&](int i) { return load_comoment(partials + i * stride, 1); });
}

// Adds W column values to a run of W consecutive partial sums in shared memory: one vector
// load and one store.
template <int W>
__device__ __forceinline__ void add_run(float* run, const float (&values)[W]) {
  static_assert(W == 2 || W == 4, "runs of 2 or 4 slots");
  if constexpr (W == 4) {
    const float4 s = *reinterpret_cast<float4*>(run);
    *reinterpret_cast<float4*>(run) =
        make_float4(s.x + values[0], s.y + values[1], s.z + values[2], s.w + values[3]);
  } else {
    const float2 s = *reinterpret_cast<float2*>(run);
    *reinterpret_cast<float2*>(run) = make_float2(s.x + values[0], s.y + values[1]);
  }
}

// Folding column partial sums: every CTA takes items first, first + step, ... below last (runs
// of W columns of its share), and adds K partial sums per column over the Fold CTAs of its
// cluster in rank order and over Groups row groups. `slot(i, k, g, w)` is where sum k of row group
// g for column w of item i sits in a CTA's shared memory, `load(slot, rank)` reads it from CTA
// `rank`, `store(i, totals)` writes totals[k * W + w]. Loads are unrolled, outermost last, up to
// 32 in flight: enough to hide the latency, few enough that the fold never needs more registers
// than the kernel's main loop (which sets the whole kernel's count).
template <int Fold, int K, int Groups, int W, class Load, class Slot, class Store>
__device__ __forceinline__ void fold_columns_of(int first, int last, int step, Load load, Slot slot,
                                                Store store) {
  constexpr int kFoldLoads = 32;
  constexpr int per_rank = K * W * Groups;
  constexpr int per_item = per_rank * Fold;
  constexpr int groups_unrolled = per_rank <= kFoldLoads ? Groups : 1;
  constexpr int ranks_unrolled = per_item <= kFoldLoads ? Fold : 1;
  constexpr int items_unrolled = 4 * per_item <= kFoldLoads   ? 4
                                 : 2 * per_item <= kFoldLoads ? 2
                                                              : 1;
#pragma unroll(items_unrolled)
  for (int i = first; i < last; i += step) {
    float totals[K * W];
#pragma unroll
    for (int t = 0; t < K * W; ++t) totals[t] = 0.0f;
#pragma unroll(ranks_unrolled)
    for (int rank = 0; rank < Fold; ++rank) {
#pragma unroll(groups_unrolled)
      for (int g = 0; g < Groups; ++g) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int w = 0; w < W; ++w) totals[k * W + w] += load(slot(i, k, g, w), rank);
        }
      }
    }
    store(i, totals);
  }
}

// fold_columns_of()'s `load` for a CTA that folds alone: its own shared memory.
struct OwnLoad {
  __device__ __forceinline__ float operator()(const float* slot, int) const { return *slot; }
};

// Writes W consecutive partial sums at column c0 of a workspace row (16-byte aligned where N is a
// multiple of 4): whole 32-byte sectors where W allows, nothing at or past column N.
template <int W, int N>
__device__ __forceinline__ void store_totals(float* row, int c0, const float* totals) {
  if constexpr (W % 4 == 0 && N % 4 == 0) {
    if (c0 + W <= N) {
#pragma unroll
      for (int w = 0; w < W; w += 4) {
        *reinterpret_cast<float4*>(row + c0 + w) =
            make_float4(totals[w], totals[w + 1], totals[w + 2], totals[w + 3]);
      }
      return;
    }
  }
#pragma unroll
  for (int w = 0; w < W; ++w) {
    if (c0 + w < N) row[c0 + w] = totals[w];
  }
}

// store_totals for a chunk of 8 columns whose neighbouring chunk (8 columns on) lane ^ 1 holds,
// `odd` on the second lane of the pair: the pair trades half chunks by shuffle so that each of its
// two 16-byte stores fills whole 32-byte sectors (store_totals fills each sector half by one
// store and half by the next). Every lane of the warp takes part; the chunk lies inside the row.
template <int N>
__device__ __forceinline__ void store_totals_paired(float* row, int c0, const float* totals,
                                                    bool odd) {
  float traded[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    traded[i] = __shfl_xor_sync(0xffffffffu, odd ? totals[i] : totals[4 + i], 1);
  float first[4], second[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    first[i] = odd ? traded[i] : totals[i];
    second[i] = odd ? totals[4 + i] : traded[i];
  }
  // The pair's 16 columns start at the even lane's c0, a multiple of 16.
  float4* pair = reinterpret_cast<float4*>(row + (c0 & ~15));
  const int half = odd ? 1 : 0;
  pair[half] = make_float4(first[0], first[1], first[2], first[3]);
  pair[2 + half] = make_float4(second[0], second[1], second[2], second[3]);
}

// The fold_* functions. On sm_90 and later tilenorm_prelude_sm90.cuh defines them over the CTAs
// of a thread-block cluster; before sm_90 a CTA folds alone.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
__device__ __forceinline__ unsigned fold_ctas() {
  return 1;
}
__device__ __forceinline__ unsigned fold_rank() {
  return 0;
}
__device__ __forceinline__ void fold_sync() {
  __syncthreads();
}
template <int K, int Groups, int W, class Slot, class Store>
__device__ __forceinline__ void fold_columns(int first, int last, int step, Slot slot,
                                             Store store) {
  fold_columns_of<1, K, Groups, W>(first, last, step, OwnLoad{}, slot, store);
}
#endif

}  // namespace tn
