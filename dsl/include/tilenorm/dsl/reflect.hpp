#pragma once
// Generic conversions for Boost.Hana-adapted aggregates of integer fields: JSON and a
// "name=value" description, written once instead of once per struct.
#include <algorithm>
#include <boost/hana.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm::reflect {

template <class Struct>
nlohmann::json to_json(const Struct& value) {
  nlohmann::json out = nlohmann::json::object();
  boost::hana::for_each(boost::hana::accessors<Struct>(), [&](auto accessor) {
    out[boost::hana::to<const char*>(boost::hana::first(accessor))] =
        boost::hana::second(accessor)(value);
  });
  return out;
}

// Reads every field; throws tilenorm::Error naming `what` and the field that is missing or
// not an integer. Extra fields are rejected too, so a config from another version is noticed.
// The fields named in `may_be_absent` (knobs added after such JSON was first written) read as
// 0 where they are absent, the value that means what the JSON meant before they existed.
template <class Struct>
Struct from_json(const nlohmann::json& in, const std::string& what,
                 std::span<const std::string_view> may_be_absent = {}) {
  if (!in.is_object()) throw Error(what + ": expected a JSON object, got " + in.dump());
  Struct value{};
  std::size_t fields = 0;
  boost::hana::for_each(boost::hana::accessors<Struct>(), [&](auto accessor) {
    const char* name = boost::hana::to<const char*>(boost::hana::first(accessor));
    auto& field = boost::hana::second(accessor)(value);
    const auto it = in.find(name);
    if (it == in.end() && std::find(may_be_absent.begin(), may_be_absent.end(),
                                    std::string_view(name)) != may_be_absent.end()) {
      return;
    }
    if (it == in.end() || !it->is_number_integer()) {
      throw Error(what + ": field '" + name + "' is missing or not an integer");
    }
    field = it->template get<std::remove_reference_t<decltype(field)>>();
    ++fields;
  });
  if (in.size() != fields) throw Error(what + ": unexpected fields in " + in.dump());
  return value;
}

// "field=value field=value ...", each value as `format(field name, value)` writes it; a field
// whose format gives std::nullopt is left out.
template <class Struct, class Format>
std::string describe(const Struct& value, Format&& format) {
  std::string out;
  boost::hana::for_each(boost::hana::accessors<Struct>(), [&](auto accessor) {
    const char* name = boost::hana::to<const char*>(boost::hana::first(accessor));
    const std::optional<std::string> text =
        format(std::string_view(name), boost::hana::second(accessor)(value));
    if (!text) return;
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += *text;
  });
  return out;
}

template <class Struct>
bool equal(const Struct& a, const Struct& b) {
  bool same = true;
  boost::hana::for_each(boost::hana::accessors<Struct>(), [&](auto accessor) {
    same = same && boost::hana::second(accessor)(a) == boost::hana::second(accessor)(b);
  });
  return same;
}

}  // namespace tilenorm::reflect
