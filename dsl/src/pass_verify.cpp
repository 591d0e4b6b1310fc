#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/names.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

using ir::Axis;
using ir::Role;
using ir::Shape;

constexpr std::size_t kMaxNameLength = 64;

bool is_identifier(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength ||
      std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string printable(const std::string& name) {
  std::string shown;
  for (char c : name.substr(0, kMaxNameLength)) {
    shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return name.size() > kMaxNameLength ? shown + "..." : shown;
}

}  // namespace

void verify(const ir::Program& p) {
  if (!is_identifier(p.name)) {
    throw ProgramError("program name '" + printable(p.name) +
                       "' is not an identifier (letters, digits and '_', not starting with a "
                       "digit, at most 64 characters)");
  }
  const std::string where = "program '" + p.name + "': ";
  auto fail = [&where](const std::string& what) { throw ProgramError(where + what); };
  if (!p.graph) fail("has no graph");

  std::set<std::string> names;
  bool reads_rows = false, writes = false;
  for (const ir::Slot& slot : p.slots) {
    const std::string kind(ir::slot_kind(slot));
    if (!is_identifier(slot.name)) {
      fail(kind + " name '" + printable(slot.name) +
           "' is not an identifier (letters, digits and '_', not starting with a digit, at most "
           "64 characters)");
    }
    if (slot.name.rfind("tn_", 0) == 0)
      fail(kind + " name '" + slot.name + "' uses the reserved prefix 'tn_'");
    check_slot_name(p.name, slot.name);
    if (!names.insert(slot.name).second) fail("the name '" + slot.name + "' is used twice");
    if (slot.role == Role::read && slot.shape == Shape::tile) reads_rows = true;
    if (slot.role == Role::written) {
      writes = writes || slot.shape != Shape::row_scalar;
      if (slot.value >= p.graph->size()) fail(kind + " '" + slot.name + "' refers to no node");
      const Shape value = p.graph->node(slot.value).shape;
      if (!ir::fits_in(value, slot.shape)) {
        fail(kind + " '" + slot.name + "' is a " + std::string(ir::shape_name(slot.shape)) +
             " but its value is a " + std::string(ir::shape_name(value)));
      }
    }
    if ((slot.shape == Shape::row_scalar || slot.shape == Shape::scalar) && slot.dtype &&
        *slot.dtype != DType::f32) {
      fail(kind + " '" + slot.name + "' must be fp32");
    }
  }
  if (!reads_rows) fail("declares no row input; a norm reads at least one [M, N] tensor");
  if (!writes) fail("writes no row output; add one with output(name, tile)");

  std::vector<bool> used(p.slots.size(), false);
  const std::vector<ir::NodeId> reachable = p.reachable_nodes();
  std::vector<bool> after_cross_row(p.graph->size(), false);
  for (ir::NodeId id : reachable) {
    const ir::Node& n = p.graph->node(id);
    bool depends_on_cross_row = false;
    for (int i = 0; i < n.arity; ++i) depends_on_cross_row |= after_cross_row[n.args[i]];
    if (n.op == ir::Op::load) {
      if (n.index < 0 || static_cast<std::size_t>(n.index) >= p.slots.size() ||
          p.slots[n.index].role != Role::read) {
        fail("reads slot number " + std::to_string(n.index) + ", which is not a declared input");
      }
      const ir::Slot& slot = p.slots[n.index];
      if (slot.shape != n.shape) {
        fail("reads " + std::string(ir::slot_kind(slot)) + " '" + slot.name + "' as a " +
             std::string(ir::shape_name(n.shape)));
      }
      used[n.index] = true;
    }
    if (n.op == ir::Op::constant && std::isfinite(n.value) && std::fabs(n.value) > FLT_MAX) {
      char text[40];
      std::snprintf(text, sizeof text, "%.17g", n.value);
      fail("the constant " + std::string(text) +
           " is outside the fp32 range; kernels compute in fp32, so it would become infinity");
    }
    if (ir::is_reduction(n.op)) {
      Shape arg = p.graph->node(n.args[0]).shape;
      for (int i = 1; i < n.arity; ++i) arg = ir::broadcast(arg, p.graph->node(n.args[i]).shape);
      if (!ir::varies(arg, n.axis)) {
        fail("reduction '" + std::string(ir::op_name(n.op)) + "' " +
             std::string(ir::axis_name(n.axis)) + " takes a value that varies that way, got a " +
             std::string(ir::shape_name(arg)));
      }
      if (n.axis == Axis::across_rows && n.op != ir::Op::reduce_sum) {
        fail("only sums reduce across rows, not '" + std::string(ir::op_name(n.op)) + "'");
      }
      if (n.axis == Axis::along_row && depends_on_cross_row) {
        fail("a reduction along the row depends on a reduction across rows");
      }
      if (n.axis == Axis::across_rows) depends_on_cross_row = true;
    }
    if (depends_on_cross_row && ir::varies_across_rows(n.shape)) {
      fail(
          "a value that varies across rows depends on a reduction across rows (that needs a "
          "grid-wide barrier, which tilenorm does not generate)");
    }
    after_cross_row[id] = depends_on_cross_row;
  }
  for (std::size_t i = 0; i < p.slots.size(); ++i) {
    if (p.slots[i].role == Role::read && !used[i]) {
      fail(std::string(ir::slot_kind(p.slots[i])) + " '" + p.slots[i].name +
           "' is declared but never used");
    }
  }
}

}  // namespace tilenorm::passes
