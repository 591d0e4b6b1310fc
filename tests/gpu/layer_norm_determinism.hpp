#pragma once
// Shared by the GPU tests: layer_norm_backward on `runtime` over [m, n] bf16 rows gives the same
// bits in ten launches and in two replays of a CUDA graph that captured one.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "tilenorm/kernels/norms.hpp"
#include "tilenorm/runtime/check.hpp"
#include "tilenorm/runtime/driver.hpp"

inline void check_layer_norm_backward_determinism(tilenorm::Runtime& runtime, std::int64_t m,
                                                  std::int64_t n) {
  using tilenorm::DType;
  namespace driver = tilenorm::driver;
  driver::ScopedContext scope(driver::primary_context(0));
  const std::size_t bytes = static_cast<std::size_t>(m * n) * 2;
  driver::DeviceBuffer x(bytes), dy(bytes), dx(bytes), w(n * 2), b(n * 2), dw(n * 2), db(n * 2);
  const auto values =
      tilenorm::encode(tilenorm::random_values(m * n, 5, -2, 2, DType::bf16), DType::bf16);
  x.upload(values.data(), bytes);
  const auto grads =
      tilenorm::encode(tilenorm::random_values(m * n, 6, -1, 1, DType::bf16), DType::bf16);
  dy.upload(grads.data(), bytes);
  const auto weights =
      tilenorm::encode(tilenorm::random_values(n, 7, -1, 1, DType::bf16), DType::bf16);
  w.upload(weights.data(), weights.size());
  b.upload(weights.data(), weights.size());
  auto view = [&](const driver::DeviceBuffer& buffer) {
    return tilenorm::TensorView::contiguous(reinterpret_cast<void*>(buffer.get()), DType::bf16, m,
                                            n);
  };
  auto column = [&](const driver::DeviceBuffer& buffer) {
    return tilenorm::ColumnView{reinterpret_cast<void*>(buffer.get()), DType::bf16, n};
  };
  const tilenorm::LayerNormBackward args{.x = view(x),
                                         .dy = view(dy),
                                         .dx = view(dx),
                                         .weight = column(w),
                                         .bias = column(b),
                                         .dweight = column(dw),
                                         .dbias = column(db)};
  const std::size_t workspace_bytes = tilenorm::layer_norm_backward_workspace(runtime, args);
  REQUIRE(workspace_bytes > 0);
  driver::DeviceBuffer workspace(workspace_bytes);
  const tilenorm::Workspace ws{reinterpret_cast<void*>(workspace.get()), workspace_bytes};
  driver::Stream stream;
  auto run_and_read = [&] {
    tilenorm::layer_norm_backward(runtime, args, ws,
                                  reinterpret_cast<tilenorm::Stream>(stream.get()));
    stream.synchronize();
    std::vector<std::byte> out(bytes + 4 * n);
    dx.download(out.data(), bytes);
    dw.download(out.data() + bytes, 2 * n);
    db.download(out.data() + bytes + 2 * n, 2 * n);
    return out;
  };
  const std::vector<std::byte> first = run_and_read();
  for (int run = 1; run < 10; ++run) {
    CAPTURE(run);
    CHECK(run_and_read() == first);
  }
  // Captured into a CUDA graph (no allocation or synchronisation in the launch path), the
  // replay gives the same bits.
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  driver::check(driver::api().cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_GLOBAL),
                "cuStreamBeginCapture");
  tilenorm::layer_norm_backward(runtime, args, ws,
                                reinterpret_cast<tilenorm::Stream>(stream.get()));
  driver::check(driver::api().cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
  driver::check(driver::api().cuGraphInstantiateWithFlags(&exec, graph, 0),
                "cuGraphInstantiateWithFlags");
  // Twice: whatever a launch leaves in the workspace (a software cluster's arrival counts) is
  // reset by the graph itself.
  for (int replay = 0; replay < 2; ++replay) {
    CAPTURE(replay);
    dx.fill_bytes(0xFF);
    dw.fill_bytes(0xFF);
    driver::check(driver::api().cuGraphLaunch(exec, stream.get()), "cuGraphLaunch");
    stream.synchronize();
    std::vector<std::byte> replayed(bytes + 4 * n);
    dx.download(replayed.data(), bytes);
    dw.download(replayed.data() + bytes, 2 * n);
    db.download(replayed.data() + bytes + 2 * n, 2 * n);
    CHECK(replayed == first);
  }
  driver::api().cuGraphExecDestroy(exec);
  driver::api().cuGraphDestroy(graph);
}
