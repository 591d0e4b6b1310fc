#include "tilenorm/runtime/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <sstream>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/interpreter.hpp"
#include "tilenorm/runtime/driver.hpp"

namespace tilenorm {

bool CheckReport::ok() const {
  if (unwritten != 0 || clobbered != 0 || outputs.empty()) return false;
  return std::all_of(outputs.begin(), outputs.end(),
                     [](const Output& o) { return o.comparison.ok(); });
}

std::string CheckReport::describe() const {
  std::ostringstream out;
  out << "config " << used.config.describe() << " (" << config_source_name(used.source)
      << "); unwritten " << unwritten << ", clobbered " << clobbered;
  for (const auto& o : outputs) out << "; " << o.name << ": " << o.comparison.describe();
  return out.str();
}

namespace {

constexpr unsigned char kPoison = 0xFF;  // all-ones is a NaN in fp32, fp16 and bf16

// A row tensor in device memory, laid out with the requested stride and offset.
struct DeviceRows {
  driver::DeviceBuffer buffer;
  std::vector<std::byte> host;  // the whole buffer as uploaded (padding included)
  TensorView view;
};

DeviceRows make_rows(const CheckOptions& o, const std::vector<double>* values) {
  const std::size_t size = dtype_size(o.io_dtype);
  const std::int64_t stride = o.cols + o.extra_row_stride;
  const std::size_t elements =
      static_cast<std::size_t>(o.element_offset + std::max<std::int64_t>(o.rows, 1) * stride);
  DeviceRows d;
  d.host.assign(elements * size, std::byte{kPoison});
  if (values) {
    const std::vector<std::byte> bytes = encode(*values, o.io_dtype);
    for (std::int64_t r = 0; r < o.rows; ++r) {
      std::memcpy(d.host.data() + (o.element_offset + r * stride) * size,
                  bytes.data() + r * o.cols * size, o.cols * size);
    }
  }
  d.buffer = driver::DeviceBuffer(d.host.size());
  d.buffer.upload(d.host.data(), d.host.size());
  d.view = {reinterpret_cast<std::byte*>(d.buffer.get()) + o.element_offset * size, o.io_dtype,
            o.rows, o.cols, stride};
  return d;
}

std::vector<std::int64_t> reference_row_indices(const CheckOptions& o) {
  std::vector<std::int64_t> rows;
  if (o.reference_rows <= 0 || o.reference_rows >= o.rows) {
    for (std::int64_t r = 0; r < o.rows; ++r) rows.push_back(r);
    return rows;
  }
  // Both ends (where tails and the last partial CTA are) and evenly spread rows between.
  for (std::int64_t i = 0; i < o.reference_rows; ++i)
    rows.push_back(i * (o.rows - 1) / (o.reference_rows - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// Elements of the view still holding the poison pattern (never written), counted per row in
// parallel: large outputs are hundreds of megabytes.
std::size_t count_poisoned_elements(const std::vector<std::byte>& buffer, const CheckOptions& o,
                                    std::size_t size) {
  const std::int64_t stride = o.cols + o.extra_row_stride;
  auto count_rows = [&](std::int64_t first, std::int64_t last) {
    std::size_t poisoned = 0;
    for (std::int64_t r = first; r < last; ++r) {
      const std::byte* row = buffer.data() + (o.element_offset + r * stride) * size;
      for (std::int64_t c = 0; c < o.cols; ++c) {
        bool all_poison = true;
        for (std::size_t b = 0; b < size; ++b)
          all_poison = all_poison && row[c * size + b] == std::byte{kPoison};
        poisoned += all_poison ? 1 : 0;
      }
    }
    return poisoned;
  };
  const std::int64_t workers = std::clamp<std::int64_t>(o.rows * o.cols / (1 << 20), 1, 32);
  const std::int64_t per_worker = (o.rows + workers - 1) / workers;
  std::vector<std::future<std::size_t>> jobs;
  for (std::int64_t first = 0; first < o.rows; first += per_worker) {
    jobs.push_back(
        std::async(std::launch::async, count_rows, first, std::min(o.rows, first + per_worker)));
  }
  std::size_t total = 0;
  for (auto& job : jobs) total += job.get();
  return total;
}

// Bytes outside the view (before it, between rows, after it) that no longer hold the poison.
std::size_t count_changed_padding(const std::vector<std::byte>& buffer, const CheckOptions& o,
                                  std::size_t size) {
  const std::int64_t stride = o.cols + o.extra_row_stride;
  auto changed = [&](std::size_t begin, std::size_t end) {
    return static_cast<std::size_t>(
        std::count_if(buffer.begin() + begin, buffer.begin() + end,
                      [](std::byte b) { return b != std::byte{kPoison}; }));
  };
  std::size_t total = 0;
  std::size_t cursor = 0;
  for (std::int64_t r = 0; r < o.rows; ++r) {
    const std::size_t row_begin = (o.element_offset + r * stride) * size;
    total += changed(cursor, row_begin);
    cursor = row_begin + o.cols * size;
  }
  return total + changed(cursor, buffer.size());
}

}  // namespace

CheckReport check_against_interpreter(const Norm& norm, const CheckOptions& o) {
  const ir::Program& p = norm.program();
  driver::ScopedContext scope(driver::primary_context(0));
  CheckReport report;

  // Fresh random inputs, exactly representable in their storage types.
  std::vector<std::vector<double>> inputs;
  for (std::size_t i = 0; i < p.row_inputs.size(); ++i) {
    inputs.push_back(random_values(static_cast<std::size_t>(o.rows * o.cols), o.seed * 7919 + i,
                                   -2.0, 2.5, o.io_dtype));
  }
  std::vector<std::vector<double>> columns;
  for (std::size_t i = 0; i < p.columns.size(); ++i) {
    columns.push_back(random_values(static_cast<std::size_t>(o.cols), o.seed * 104729 + i, -1.5,
                                    1.5, o.param_dtype));
  }
  std::vector<float> scalars =
      o.scalars.empty() ? std::vector<float>(p.scalars.size(), 1e-5f) : o.scalars;

  std::vector<DeviceRows> device_inputs, device_outputs;
  std::vector<TensorView> input_views, output_views;
  for (const auto& values : inputs) {
    device_inputs.push_back(make_rows(o, &values));
    input_views.push_back(device_inputs.back().view);
  }
  for (std::size_t i = 0; i < p.row_outputs.size(); ++i) {
    device_outputs.push_back(make_rows(o, nullptr));
    output_views.push_back(device_outputs.back().view);
  }
  std::vector<driver::DeviceBuffer> column_buffers;
  std::vector<ColumnView> column_views;
  for (const auto& values : columns) {
    const std::vector<std::byte> bytes = encode(values, o.param_dtype);
    column_buffers.emplace_back(bytes.size());
    column_buffers.back().upload(bytes.data(), bytes.size());
    column_views.push_back(
        {reinterpret_cast<void*>(column_buffers.back().get()), o.param_dtype, o.cols});
  }
  std::vector<driver::DeviceBuffer> stat_buffers;
  std::vector<RowStatView> stat_views;
  for (std::size_t i = 0; i < p.row_stats.size(); ++i) {
    stat_buffers.emplace_back(static_cast<std::size_t>(std::max<std::int64_t>(o.rows, 1)) *
                              sizeof(float));
    stat_buffers.back().fill_bytes(kPoison);
    stat_views.push_back({reinterpret_cast<float*>(stat_buffers.back().get()), o.rows});
  }

  const KernelArgs args{input_views, output_views, column_views, stat_views, scalars};
  report.used =
      o.config ? ResolvedConfig{*o.config, ConfigSource::explicit_config} : norm.resolve(args);
  driver::Stream stream;
  if (o.config) {
    norm.launch(args, reinterpret_cast<Stream>(stream.get()), *o.config);
  } else {
    norm.launch(args, reinterpret_cast<Stream>(stream.get()));
  }
  stream.synchronize();

  // The oracle, on all rows or an evenly spread sample of them.
  const std::vector<std::int64_t> rows = reference_row_indices(o);
  InterpreterInputs reference_in;
  reference_in.rows = static_cast<std::int64_t>(rows.size());
  reference_in.cols = o.cols;
  for (const auto& values : inputs) {
    std::vector<double> picked;
    picked.reserve(rows.size() * o.cols);
    for (std::int64_t r : rows)
      picked.insert(picked.end(), values.begin() + r * o.cols, values.begin() + (r + 1) * o.cols);
    reference_in.row_inputs.push_back(std::move(picked));
  }
  reference_in.columns = columns;
  reference_in.scalars.assign(scalars.begin(), scalars.end());
  const InterpreterOutputs expected =
      o.rows > 0 ? interpret(p, reference_in) : InterpreterOutputs{};

  const std::size_t size = dtype_size(o.io_dtype);
  const std::int64_t stride = o.cols + o.extra_row_stride;
  for (std::size_t i = 0; i < device_outputs.size(); ++i) {
    DeviceRows& d = device_outputs[i];
    std::vector<std::byte> after(d.host.size());
    d.buffer.download(after.data(), after.size());
    report.unwritten += count_poisoned_elements(after, o, size);
    report.clobbered += count_changed_padding(after, o, size);
    std::vector<double> actual;
    actual.reserve(rows.size() * o.cols);
    for (std::int64_t r : rows) {
      const std::size_t begin = (o.element_offset + r * stride) * size;
      const std::vector<double> row =
          decode(std::span(after).subspan(begin, o.cols * size), o.io_dtype);
      actual.insert(actual.end(), row.begin(), row.end());
    }
    if (o.rows > 0) {
      report.outputs.push_back({p.row_outputs[i].name, compare(actual, expected.row_outputs[i],
                                                               tolerance_for(o.io_dtype))});
    }
  }
  for (std::size_t i = 0; i < stat_buffers.size(); ++i) {
    std::vector<float> stats(static_cast<std::size_t>(o.rows));
    if (o.rows > 0) stat_buffers[i].download(stats.data(), stats.size() * sizeof(float));
    std::vector<double> actual;
    for (std::int64_t r : rows) actual.push_back(stats[r]);
    for (float v : stats) report.unwritten += std::isnan(v) ? 1 : 0;
    if (o.rows > 0) {
      report.outputs.push_back(
          {p.row_stats[i].name, compare(actual, expected.row_stats[i], tolerance_for(DType::f32))});
    }
  }
  return report;
}

}  // namespace tilenorm
