#include <cctype>
#include <set>
#include <string>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/passes.hpp"

namespace tilenorm::passes {
namespace {

bool is_identifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

void verify(const ir::Program& p) {
  const std::string where = "program '" + p.name + "': ";
  auto fail = [&where](const std::string& what) { throw ProgramError(where + what); };
  if (!is_identifier(p.name)) {
    throw ProgramError(
        "program name '" + p.name +
        "' is not an identifier (letters, digits and '_', not starting with a digit)");
  }
  if (!p.graph) fail("has no graph");
  if (p.row_inputs.empty()) fail("declares no row input; a norm reads at least one [M, N] tensor");
  if (p.row_outputs.empty()) fail("writes no row output; add one with output(name, tile)");

  std::set<std::string> names;
  auto check_name = [&](const std::string& name, const char* kind) {
    if (!is_identifier(name)) fail(std::string(kind) + " name '" + name + "' is not an identifier");
    if (!names.insert(name).second) fail("the name '" + name + "' is used twice");
  };
  for (const auto& n : p.row_inputs) check_name(n, "row input");
  for (const auto& n : p.columns) check_name(n, "column");
  for (const auto& n : p.scalars) check_name(n, "scalar");
  for (const auto& o : p.row_outputs) check_name(o.name, "row output");
  for (const auto& o : p.row_stats) check_name(o.name, "saved statistic");

  for (const auto& o : p.row_outputs) {
    if (o.value >= p.graph->size()) fail("row output '" + o.name + "' refers to no node");
    if (p.graph->node(o.value).shape != ir::Shape::tile) {
      fail("row output '" + o.name + "' is a " +
           std::string(ir::shape_name(p.graph->node(o.value).shape)) + ", not a Tile");
    }
  }
  for (const auto& o : p.row_stats) {
    if (o.value >= p.graph->size()) fail("saved statistic '" + o.name + "' refers to no node");
    if (p.graph->node(o.value).shape != ir::Shape::row_scalar) {
      fail("saved statistic '" + o.name + "' is a " +
           std::string(ir::shape_name(p.graph->node(o.value).shape)) + ", not a RowScalar");
    }
  }

  std::vector<bool> input_used(p.row_inputs.size()), column_used(p.columns.size()),
      scalar_used(p.scalars.size());
  auto mark = [&](std::vector<bool>& used, std::int32_t index, const char* kind) {
    if (index < 0 || static_cast<std::size_t>(index) >= used.size()) {
      fail(std::string("refers to ") + kind + " number " + std::to_string(index) +
           ", which is not declared");
    }
    used[index] = true;
  };
  for (ir::NodeId id : p.reachable_nodes()) {
    const ir::Node& n = p.graph->node(id);
    if (n.op == ir::Op::load_row) mark(input_used, n.index, "row input");
    if (n.op == ir::Op::load_column) mark(column_used, n.index, "column");
    if (n.op == ir::Op::scalar_param) mark(scalar_used, n.index, "scalar");
    if (ir::is_reduction(n.op) && p.graph->node(n.args[0]).shape != ir::Shape::tile) {
      fail("reduction '" + std::string(ir::op_name(n.op)) + "' takes a Tile");
    }
  }
  auto check_used = [&](const std::vector<bool>& used, const std::vector<std::string>& declared,
                        const char* kind) {
    for (std::size_t i = 0; i < used.size(); ++i) {
      if (!used[i]) fail(std::string(kind) + " '" + declared[i] + "' is declared but never used");
    }
  };
  check_used(input_used, p.row_inputs, "row input");
  check_used(column_used, p.columns, "column");
  check_used(scalar_used, p.scalars, "scalar");
}

}  // namespace tilenorm::passes
