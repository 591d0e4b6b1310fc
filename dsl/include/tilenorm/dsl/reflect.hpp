#pragma once
// Generic conversions for BOOST_HANA_DEFINE_STRUCT aggregates of integer fields: JSON and a
// "name=value" description, written once instead of once per struct.
#include <boost/hana.hpp>
#include <nlohmann/json.hpp>
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
template <class Struct>
Struct from_json(const nlohmann::json& in, const std::string& what) {
  if (!in.is_object()) throw Error(what + ": expected a JSON object, got " + in.dump());
  Struct value{};
  std::size_t fields = 0;
  boost::hana::for_each(boost::hana::accessors<Struct>(), [&](auto accessor) {
    const char* name = boost::hana::to<const char*>(boost::hana::first(accessor));
    auto& field = boost::hana::second(accessor)(value);
    const auto it = in.find(name);
    if (it == in.end() || !it->is_number_integer()) {
      throw Error(what + ": field '" + name + "' is missing or not an integer");
    }
    field = it->template get<std::remove_reference_t<decltype(field)>>();
    ++fields;
  });
  if (in.size() != fields) throw Error(what + ": unexpected fields in " + in.dump());
  return value;
}

// "field=value field=value ...", each value as `format(field name, value)` writes it.
template <class Struct, class Format>
std::string describe(const Struct& value, Format&& format) {
  std::string out;
  boost::hana::for_each(boost::hana::accessors<Struct>(), [&](auto accessor) {
    const char* name = boost::hana::to<const char*>(boost::hana::first(accessor));
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += format(std::string_view(name), boost::hana::second(accessor)(value));
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
