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

DeviceRows make_rows(const CheckOptions& o, DType dtype, const std::vector<double>* values) {
  const std::size_t size = dtype_size(dtype);
  const std::int64_t stride = o.cols + o.extra_row_stride;
  const std::size_t elements =
      static_cast<std::size_t>(o.element_offset + std::max<std::int64_t>(o.rows, 1) * stride);
  DeviceRows d;
  d.host.assign(elements * size, std::byte{kPoison});
  if (values) {
    const std::vector<std::byte> bytes = encode(*values, dtype);
    for (std::int64_t r = 0; r < o.rows; ++r) {
      std::memcpy(d.host.data() + (o.element_offset + r * stride) * size,
                  bytes.data() + r * o.cols * size, o.cols * size);
    }
  }
  d.buffer = driver::DeviceBuffer(d.host.size());
  d.buffer.upload(d.host.data(), d.host.size());
  d.view = {reinterpret_cast<std::byte*>(d.buffer.get()) + o.element_offset * size, dtype, o.rows,
            o.cols, stride};
  return d;
}

// A dense buffer (column, row statistic or scalar): the values, or the poison when null. The
// values start `offset` elements into the buffer, after poison.
driver::DeviceBuffer make_dense(std::size_t count, DType dtype, const std::vector<double>* values,
                                std::size_t offset = 0) {
  const std::size_t size = dtype_size(dtype);
  driver::DeviceBuffer buffer((std::max<std::size_t>(count, 1) + offset) * size);
  if (values && count > 0) {
    std::vector<std::byte> bytes(offset * size, std::byte{kPoison});
    const std::vector<std::byte> encoded = encode(*values, dtype);
    bytes.insert(bytes.end(), encoded.begin(), encoded.end());
    buffer.upload(bytes.data(), bytes.size());
  } else {
    buffer.fill_bytes(kPoison);
  }
  return buffer;
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

void check_slot_offsets(const ir::Program& program, const CheckOptions& options) {
  for (const auto& entry : options.slot_offsets) {
    const std::string& name = entry.first;
    const auto index = program.find_slot(name);
    std::string problem;
    if (!index) {
      problem = "is no slot";
    } else if (program.slots[*index].role != ir::Role::read) {
      problem = "is written, not read";
    } else if (program.slots[*index].shape == ir::Shape::scalar) {
      problem = "is a scalar (its value is one of CheckOptions::scalars)";
    }
    if (problem.empty()) continue;
    std::string readable;
    for (const ir::Slot& slot : program.slots) {
      if (slot.role == ir::Role::read && slot.shape != ir::Shape::scalar)
        readable += (readable.empty() ? "" : ", ") + slot.name;
    }
    throw Error("CheckOptions::slot_offsets names '" + name + "', which in program '" +
                program.name + "' " + problem + " (slots it can offset: " + readable + ")");
  }
}

CheckReport check_against_interpreter(const Norm& norm, const CheckOptions& o) {
  const ir::Program& p = norm.program();
  check_slot_offsets(p, o);
  driver::ScopedContext scope(driver::primary_context(0));
  CheckReport report;
  auto dtype_of = [&](const ir::Slot& slot) {
    return ir::storage_dtype(slot, o.io_dtype, o.param_dtype);
  };

  // Every slot gets a buffer: read slots fresh random values exactly representable in their
  // storage type, written slots the poison.
  const std::size_t slots = p.slots.size();
  std::vector<std::vector<double>> values(slots);
  std::vector<DeviceRows> rows_buffers(slots);
  std::vector<driver::DeviceBuffer> dense(slots);
  std::vector<Arg> args;
  std::size_t scalar_index = 0;
  for (std::size_t i = 0; i < slots; ++i) {
    const ir::Slot& slot = p.slots[i];
    const DType dtype = dtype_of(slot);
    const bool read = slot.role == ir::Role::read;
    const std::uint64_t seed = o.seed * 7919 + i * 104729;
    const std::size_t count = slot_elements(slot.shape, o.rows, o.cols);
    const auto offset_entry = o.slot_offsets.find(slot.name);
    const double slot_offset = offset_entry == o.slot_offsets.end() ? 0.0 : offset_entry->second;
    switch (slot.shape) {
      case ir::Shape::tile:
        if (read) {
          const double shift = o.row_input_offset + slot_offset;
          values[i] = random_values(count, seed, -2.0 + shift, 2.5 + shift, dtype);
        }
        rows_buffers[i] = make_rows(o, dtype, read ? &values[i] : nullptr);
        args.emplace_back(rows_buffers[i].view);
        break;
      case ir::Shape::column: {
        if (read)
          values[i] = random_values(count, seed, -1.5 + slot_offset, 1.5 + slot_offset, dtype);
        // Read columns (weights) start column_element_offset elements into their buffer;
        // written ones (their gradients) at its start.
        const auto offset = read ? static_cast<std::size_t>(o.column_element_offset) : 0;
        dense[i] = make_dense(count, dtype, read ? &values[i] : nullptr, offset);
        args.emplace_back(
            ColumnView{reinterpret_cast<std::byte*>(dense[i].get()) + offset * dtype_size(dtype),
                       dtype, o.cols});
        break;
      }
      case ir::Shape::row_scalar:
        // Positive, like a saved rstd; a saved mean may be anything, so this is fine too.
        if (read)
          values[i] = random_values(count, seed, 0.5 + slot_offset, 1.5 + slot_offset, DType::f32);
        dense[i] = make_dense(count, DType::f32, read ? &values[i] : nullptr);
        args.emplace_back(RowStatView{reinterpret_cast<float*>(dense[i].get()), o.rows});
        break;
      case ir::Shape::scalar:
        if (read) {
          const float value = scalar_index < o.scalars.size() ? o.scalars[scalar_index]
                              : slot.needs_grad               ? 0.75f
                                                              : 1e-5f;
          ++scalar_index;
          values[i] = {static_cast<double>(value)};
          args.emplace_back(value);
        } else {
          dense[i] = make_dense(1, DType::f32, nullptr);
          args.emplace_back(ScalarView{reinterpret_cast<float*>(dense[i].get())});
        }
        break;
    }
  }

  report.used =
      o.config ? ResolvedConfig{*o.config, ConfigSource::explicit_config} : norm.resolve(args);
  driver::DeviceBuffer workspace;
  const std::size_t workspace_bytes =
      o.config ? norm.workspace_bytes(args, *o.config) : norm.workspace_bytes(args);
  if (workspace_bytes > 0) {
    workspace = driver::DeviceBuffer(workspace_bytes);
    // NaN in every partial sum the main kernel fails to write reaches an output.
    workspace.fill_bytes(0xff);
  }
  report.workspace_bytes = workspace_bytes;
  const Workspace ws{reinterpret_cast<void*>(workspace.get()), workspace_bytes};
  driver::Stream stream;
  if (o.config) {
    norm.launch(args, reinterpret_cast<Stream>(stream.get()), *o.config, ws);
  } else {
    norm.launch(args, reinterpret_cast<Stream>(stream.get()), ws);
  }
  stream.synchronize();

  // The oracle, on all rows or an evenly spread sample of them (all rows when the program
  // sums across rows).
  const bool sums_rows = plan_kernels(norm.lowered()).needs_finish();
  CheckOptions sampled = o;
  if (sums_rows) sampled.reference_rows = 0;
  const std::vector<std::int64_t> rows = reference_row_indices(sampled);
  InterpreterInputs reference_in;
  reference_in.rows = static_cast<std::int64_t>(rows.size());
  reference_in.cols = o.cols;
  reference_in.slots.resize(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    const ir::Slot& slot = p.slots[i];
    if (slot.role != ir::Role::read) continue;
    if (slot.shape == ir::Shape::tile) {
      auto& picked = reference_in.slots[i];
      for (std::int64_t r : rows)
        picked.insert(picked.end(), values[i].begin() + r * o.cols,
                      values[i].begin() + (r + 1) * o.cols);
    } else if (slot.shape == ir::Shape::row_scalar) {
      for (std::int64_t r : rows) reference_in.slots[i].push_back(values[i][r]);
    } else {
      reference_in.slots[i] = values[i];
    }
  }
  const InterpreterOutputs expected = interpret(p, reference_in);

  const std::int64_t stride = o.cols + o.extra_row_stride;
  // Sums of many terms carry more fp32 rounding than one element's arithmetic: the absolute
  // error of a sum grows like the square root of its term count (rows for a column, every
  // element for a scalar), and its result may be far smaller than its terms.
  auto summed_tolerance = [&](DType dtype, std::int64_t terms) {
    Tolerance t = tolerance_for(dtype);
    const double terms_factor = std::sqrt(static_cast<double>(std::max<std::int64_t>(terms, 1)));
    return Tolerance{t.atol * terms_factor + 1e-6 * static_cast<double>(o.rows), t.rtol * 2};
  };
  for (std::size_t i = 0; i < slots; ++i) {
    const ir::Slot& slot = p.slots[i];
    if (slot.role != ir::Role::written) continue;
    const DType dtype = dtype_of(slot);
    std::vector<double> actual;
    Tolerance tolerance = tolerance_for(dtype);
    if (slot.shape == ir::Shape::tile) {
      const std::size_t size = dtype_size(dtype);
      DeviceRows& d = rows_buffers[i];
      std::vector<std::byte> after(d.host.size());
      d.buffer.download(after.data(), after.size());
      report.unwritten += count_poisoned_elements(after, o, size);
      report.clobbered += count_changed_padding(after, o, size);
      for (std::int64_t r : rows) {
        const std::size_t begin = (o.element_offset + r * stride) * size;
        const std::vector<double> row =
            decode(std::span(after).subspan(begin, o.cols * size), dtype);
        actual.insert(actual.end(), row.begin(), row.end());
      }
      if (o.rows == 0) continue;
    } else {
      const bool per_row = slot.shape == ir::Shape::row_scalar;
      const std::size_t count = slot_elements(slot.shape, o.rows, o.cols);
      std::vector<std::byte> bytes(count * dtype_size(dtype));
      if (count > 0) dense[i].download(bytes.data(), bytes.size());
      const std::vector<double> all = decode(bytes, dtype);
      for (double v : all) report.unwritten += std::isnan(v) ? 1 : 0;
      if (per_row) {
        for (std::int64_t r : rows) actual.push_back(all[r]);
        tolerance = tolerance_for(DType::f32);
      } else {
        actual = all;
        const bool scalar = slot.shape == ir::Shape::scalar;
        tolerance = summed_tolerance(dtype, scalar ? o.rows * o.cols : o.rows);
      }
      if (count == 0) continue;
    }
    report.outputs.push_back({slot.name, compare(actual, expected.slots[i], tolerance)});
  }
  return report;
}

}  // namespace tilenorm
