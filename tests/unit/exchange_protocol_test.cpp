// A model of the software clusters' exchange (codegen_exchange.cpp): threads stand in for the
// CTAs of a cluster, with random delays, and follow the generated code's order and formulas:
// the buffer of exchange k is k % B, a row group's store then a release increment of its count,
// and the wait for use k / B of a buffer until the count reaches (k / B + 1) * RPC * CLUSTER,
// B = 2, or 4 for pipelined kernels, which store one exchange ahead of their wait. Every read
// must see that exchange's values. It checks the protocol's design (buffer reuse and targets),
// not the CUDA code or the GPU's memory model. With one buffer fewer all 40 trials fail, and a
// target one short fails most (checked by hand, 2026-12-05).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace {

int bad_reads(int ctas, int rows_per_cta, int exchanges, bool pipelined, unsigned seed) {
  const int buffers = pipelined ? 4 : 2;
  std::vector<std::atomic<unsigned>> counts(buffers);
  std::vector<std::atomic<long long>> slots(
      static_cast<std::size_t>(buffers * rows_per_cta * ctas));
  for (auto& slot : slots) slot = -1;
  auto value = [](int k, int group, int rank) {
    return static_cast<long long>(k) * 1000000 + group * 1000 + rank;
  };
  auto slot = [&](unsigned buffer, int group, int rank) -> std::atomic<long long>& {
    return slots[(buffer * rows_per_cta + group) * ctas + rank];
  };
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ctas; ++rank) {
    threads.emplace_back([&, rank] {
      std::mt19937 rng(seed + static_cast<unsigned>(rank));
      auto jitter = [&] {
        if (rng() % 8 == 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30));
        } else {
          std::this_thread::yield();
        }
      };
      unsigned pushes = 0, waits = 0;
      auto push = [&](int k) {
        const unsigned buffer = pushes % buffers;
        for (int group = 0; group < rows_per_cta; ++group) {
          jitter();
          slot(buffer, group, rank).store(value(k, group, rank), std::memory_order_relaxed);
          counts[buffer].fetch_add(1, std::memory_order_release);
        }
        ++pushes;
      };
      auto wait = [&](int k) {
        const unsigned buffer = waits % buffers;
        const unsigned target = (waits / buffers + 1) * rows_per_cta * ctas;
        while (counts[buffer].load(std::memory_order_acquire) < target) std::this_thread::yield();
        ++waits;
        for (int group = 0; group < rows_per_cta; ++group) {
          for (int peer = 0; peer < ctas; ++peer) {
            jitter();
            if (slot(buffer, group, peer).load(std::memory_order_relaxed) != value(k, group, peer))
              ++bad;
          }
        }
      };
      for (int k = 0; k <= exchanges; ++k) {
        if (pipelined) {  // exchange k stored, then exchange k - 1 combined
          if (k < exchanges) push(k);
          if (k > 0) wait(k - 1);
        } else if (k < exchanges) {
          push(k);
          wait(k);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return bad;
}

}  // namespace

TEST_CASE("software clusters: the exchange's buffers and counts deliver every exchange whole") {
  for (int trial = 0; trial < 40; ++trial) {
    const int ctas = 2 + trial % 15;
    const int rows_per_cta = 1 + trial % 3;
    const bool pipelined = trial % 2 == 1;
    CAPTURE(ctas);
    CAPTURE(rows_per_cta);
    CAPTURE(pipelined);
    CHECK(bad_reads(ctas, rows_per_cta, 40, pipelined, 1000u * static_cast<unsigned>(trial)) == 0);
  }
}
