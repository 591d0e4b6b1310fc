#include "tilenorm/runtime/tuning_db.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <ctime>
#include <functional>
#include <limits>
#include <system_error>

#include "tilenorm/dsl/env.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/runtime/fileio.hpp"
#include "tilenorm/runtime/log.hpp"
#include "tilenorm/runtime/paths.hpp"

namespace tilenorm {
namespace {

using nlohmann::json;

// Limits that keep a hostile file from exhausting memory or the stack, far above real use.
constexpr std::size_t kMaxJsonValues = 8'000'000;
constexpr std::size_t kMaxDocumentDepth = 20;  // containers; deeper ones are cut off while parsing
constexpr int kMaxConfigDepth = 16;
constexpr std::size_t kMaxConfigValues = 4096;
constexpr std::size_t kMaxConfigStringLength = 1024;
constexpr std::size_t kMaxDeviceNameLength = 256;
constexpr std::size_t kMaxProgramHashLength = 128;
constexpr std::size_t kMaxDTypeLength = 32;
constexpr std::int64_t kMaxN = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxMBucket = std::int64_t{1} << 62;
constexpr std::size_t kProblemsShown = 5;

// Builds the document like nlohmann's own DOM parser, but replaces any container nested deeper
// than kMaxDocumentDepth by a discarded value without building it (the parser itself is not
// recursive, so only building and later copying or printing such a value could hurt), and stops
// after kMaxJsonValues values.
class BoundedJsonBuilder {
 public:
  explicit BoundedJsonBuilder(json& root) : root_(root) {}

  const std::string& error() const { return error_; }

  bool null() { return add_scalar(json(nullptr)); }
  bool boolean(bool value) { return add_scalar(json(value)); }
  bool number_integer(json::number_integer_t value) { return add_scalar(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return add_scalar(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t&) {
    return add_scalar(json(value));
  }
  bool string(json::string_t& value) { return add_scalar(json(std::move(value))); }
  bool binary(json::binary_t& value) { return add_scalar(json::binary(std::move(value))); }
  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& key) {
    pending_key_ = std::move(key);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception& error) {
    std::string_view message = error.what();
    // nlohmann prefixes "[json.exception.parse_error.101] ", which means nothing to users.
    if (message.starts_with("[json.exception.")) message.remove_prefix(message.find("] ") + 2);
    error_ = "not valid JSON: " + std::string(message);
    return false;
  }

 private:
  bool count_value() {
    if (++values_ <= kMaxJsonValues) return true;
    error_ = "more than " + std::to_string(kMaxJsonValues) + " JSON values";
    return false;
  }

  json* place(json value) {
    if (open_containers_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_containers_.back();
    if (parent.is_object()) {
      json& slot = parent[pending_key_];
      slot = std::move(value);
      return &slot;
    }
    parent.push_back(std::move(value));
    return &parent.back();
  }

  bool add_scalar(json value) {
    if (skipped_depth_ > 0) return true;
    if (!count_value()) return false;
    place(std::move(value));
    return true;
  }

  bool open(json::value_t type) {
    if (skipped_depth_ > 0) {
      ++skipped_depth_;
      return true;
    }
    if (!count_value()) return false;
    if (open_containers_.size() >= kMaxDocumentDepth) {
      place(json(json::value_t::discarded));
      skipped_depth_ = 1;
      return true;
    }
    open_containers_.push_back(place(json(type)));
    return true;
  }

  bool close() {
    if (skipped_depth_ > 0) {
      --skipped_depth_;
    } else {
      open_containers_.pop_back();
    }
    return true;
  }

  json& root_;
  std::vector<json*> open_containers_;
  std::size_t skipped_depth_ = 0;  // > 0 while inside a cut-off container
  std::size_t values_ = 0;
  std::string pending_key_;
  std::string error_;
};

// Text from a file may hold anything; warnings must stay one printable line.
std::string printable(std::string_view text) {
  std::string result(text);
  for (char& c : result) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) c = '?';
  }
  return result;
}

// A short description of a value for messages: never the whole of a huge string or structure.
std::string describe(const json& value) {
  constexpr std::size_t kShownCharacters = 40;
  switch (value.type()) {
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      if (text.size() <= kShownCharacters) return "\"" + printable(text) + "\"";
      return "\"" + printable(text.substr(0, kShownCharacters)) + "...\" (" +
             std::to_string(text.size()) + " characters)";
    }
    case json::value_t::number_float:
      return std::isfinite(value.get<double>()) ? value.dump() : "a non-finite number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::boolean:
    case json::value_t::null:
      return value.dump();
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      break;
  }
  return "a structure nested too deeply";
}

[[noreturn]] void field_error(std::string_view field, std::string_view problem) {
  throw Error("field \"" + std::string(field) + "\": " + std::string(problem));
}

json::const_iterator find_required(const json& object, std::string_view field) {
  auto found = object.find(std::string(field));
  if (found == object.end()) throw Error("field \"" + std::string(field) + "\" is missing");
  return found;
}

std::string read_string(const json& object, std::string_view field, std::size_t max_length) {
  auto value = find_required(object, field);
  if (!value->is_string()) field_error(field, "must be a string, got " + describe(*value));
  const auto& text = value->get_ref<const std::string&>();
  if (text.empty()) field_error(field, "must not be empty");
  if (text.size() > max_length) {
    field_error(field, "must be at most " + std::to_string(max_length) + " characters, got " +
                           std::to_string(text.size()));
  }
  if (std::any_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    field_error(field, "must not contain control characters, got " + describe(*value));
  }
  return text;
}

std::int64_t read_integer(const json& object, std::string_view field, std::int64_t min,
                          std::int64_t max) {
  auto value = find_required(object, field);
  if (!value->is_number_integer()) {
    field_error(field, "must be an integer, got " + describe(*value));
  }
  const bool beyond_int64 =
      value->is_number_unsigned() &&
      value->get<std::uint64_t>() > std::uint64_t{std::numeric_limits<std::int64_t>::max()};
  if (beyond_int64 || value->get<std::int64_t>() < min || value->get<std::int64_t>() > max) {
    field_error(field, "must be from " + std::to_string(min) + " to " + std::to_string(max) +
                           ", got " + value->dump());
  }
  return value->get<std::int64_t>();
}

double read_number(const json& object, std::string_view field, bool zero_allowed) {
  auto value = find_required(object, field);
  const double number = value->is_number() ? value->get<double>() : 0;
  const bool acceptable =
      value->is_number() && std::isfinite(number) && (number > 0 || (zero_allowed && number == 0));
  if (!acceptable) {
    field_error(field, std::string("must be a finite number ") + (zero_allowed ? ">= 0" : "> 0") +
                           ", got " + describe(*value));
  }
  return number;
}

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int digits_value(std::string_view digits) {
  int value = 0;
  for (char c : digits) value = value * 10 + (c - '0');
  return value;
}

// "major.minor", one to three digits each.
bool parse_compute_capability(std::string_view text, int& major, int& minor) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos) return false;
  const auto major_text = text.substr(0, dot);
  const auto minor_text = text.substr(dot + 1);
  if (!all_digits(major_text) || !all_digits(minor_text) || major_text.size() > 3 ||
      minor_text.size() > 3) {
    return false;
  }
  major = digits_value(major_text);
  minor = digits_value(minor_text);
  return true;
}

// "YYYY-MM-DDTHH:MM:SS", optionally ".fraction" (1 to 9 digits), then "Z".
bool is_utc_date_time(std::string_view text) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd";
  if (text.size() < kShape.size() + 1 || text.back() != 'Z') return false;
  for (std::size_t i = 0; i < kShape.size(); ++i) {
    const bool wants_digit = kShape[i] == 'd';
    const bool is_digit = text[i] >= '0' && text[i] <= '9';
    if (wants_digit != is_digit || (!wants_digit && text[i] != kShape[i])) return false;
  }
  const auto fraction = text.substr(kShape.size(), text.size() - kShape.size() - 1);
  if (!fraction.empty() &&
      (fraction[0] != '.' || fraction.size() > 10 || !all_digits(fraction.substr(1)))) {
    return false;
  }
  const int month = digits_value(text.substr(5, 2));
  const int day = digits_value(text.substr(8, 2));
  const int hour = digits_value(text.substr(11, 2));
  const int minute = digits_value(text.substr(14, 2));
  const int second = digits_value(text.substr(17, 2));
  return month >= 1 && month <= 12 && day >= 1 && day <= 31 && hour <= 23 && minute <= 59 &&
         second <= 60;
}

// Walks the config without recursion: a hostile config must not be able to overflow the stack.
std::optional<std::string> config_problem(const json& config) {
  if (!config.is_object()) return "must be an object, got " + describe(config);
  struct Pending {
    const json* value;
    int depth;
  };
  std::vector<Pending> pending{{&config, 1}};
  std::size_t values = 0;
  const std::string too_long = "must not hold a string or key longer than " +
                               std::to_string(kMaxConfigStringLength) + " characters";
  while (!pending.empty()) {
    const auto [value, depth] = pending.back();
    pending.pop_back();
    if (++values > kMaxConfigValues) {
      return "must hold at most " + std::to_string(kMaxConfigValues) + " values";
    }
    if (value->is_discarded() || (value->is_structured() && depth > kMaxConfigDepth)) {
      return "must not be nested more than " + std::to_string(kMaxConfigDepth) + " levels deep";
    }
    if (value->is_string() &&
        value->get_ref<const std::string&>().size() > kMaxConfigStringLength) {
      return too_long;
    }
    if (value->is_number_float() && !std::isfinite(value->get<double>())) {
      return "must not hold a non-finite number";
    }
    if (value->is_binary()) return "must not hold binary data";
    for (auto child = value->cbegin(); value->is_structured() && child != value->cend(); ++child) {
      if (value->is_object() && child.key().size() > kMaxConfigStringLength) return too_long;
      pending.push_back({&child.value(), depth + 1});
    }
  }
  return std::nullopt;
}

std::string cc_text(const TuningKey& key) {
  return std::to_string(key.cc_major) + "." + std::to_string(key.cc_minor);
}

std::string describe_key(const TuningKey& key) {
  return key.device_name + " (cc " + cc_text(key) + "), program " + key.program_hash +
         ", codegen " + std::to_string(key.codegen_version) + ", " + key.dtype +
         ", n=" + std::to_string(key.n) + ", m_bucket=" + std::to_string(key.m_bucket);
}

// The file's bytes; nullopt when it does not exist. A file over kMaxTuningDbBytes is reported
// in `contents` and not read.
std::optional<std::string> read_file_text(const std::filesystem::path& file,
                                          TuningFileContents& contents) {
  FileContents read = read_regular_file(file, kMaxTuningDbBytes, "tuning database");
  if (!read.exists) return std::nullopt;
  contents.exists = true;
  if (read.too_large) {
    contents.problems.push_back("the file is " + std::to_string(read.size) +
                                " bytes, more than the " + std::to_string(kMaxTuningDbBytes >> 20) +
                                " MiB limit");
    contents.whole_file_rejected = true;
    return std::string();
  }
  return std::move(read.bytes);
}

// The top-level object, or a description of why the document is not a tuning database.
std::optional<std::string> document_problem(const json& document) {
  if (!document.is_object()) return "the top level is " + describe(document) + ", not an object";
  auto schema = document.find("schema");
  if (schema == document.end()) return "no \"schema\" field (not a tilenorm tuning database)";
  if (!schema->is_string() || *schema != kTuningDbSchema) {
    return "schema is " + describe(*schema) + ", expected \"" + std::string(kTuningDbSchema) + "\"";
  }
  auto version = document.find("version");
  if (version == document.end()) return "no \"version\" field";
  if (!version->is_number_integer() || *version != kTuningDbVersion) {
    return "version " + describe(*version) + " is not supported (this build reads version " +
           std::to_string(kTuningDbVersion) + ")";
  }
  auto entries = document.find("entries");
  if (entries == document.end()) return "no \"entries\" field";
  if (!entries->is_array()) return "\"entries\" is " + describe(*entries) + ", not an array";
  return std::nullopt;
}

void parse_document(std::string_view text, TuningFileContents& contents) {
  const auto reject = [&](std::string problem) {
    contents.problems.push_back(std::move(problem));
    contents.whole_file_rejected = true;
  };
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return reject("the file is empty");
  json document;
  BoundedJsonBuilder builder(document);
  if (!json::sax_parse(text, &builder)) return reject(printable(builder.error()));
  if (auto problem = document_problem(document)) return reject(*std::move(problem));

  // Key -> (position in contents.entries, index in the file) to resolve repeated keys.
  std::unordered_map<TuningKey, std::pair<std::size_t, std::size_t>, TuningKeyHash> seen;
  const auto entries_field = document.find("entries");
  const json& entries = *entries_field;
  for (std::size_t index = 0; index < entries.size(); ++index) {
    const std::string where = "entry " + std::to_string(index);
    TuningEntry entry;
    try {
      entry = entries[index].get<TuningEntry>();
    } catch (const Error& error) {
      contents.problems.push_back(where + ": " + error.what());
      continue;
    }
    auto [previous, inserted] = seen.try_emplace(entry.key, contents.entries.size(), index);
    if (inserted) {
      contents.entries.push_back(std::move(entry));
      continue;
    }
    contents.problems.push_back(where + ": repeats the key of entry " +
                                std::to_string(previous->second.second) +
                                "; the later entry is used");
    contents.entries[previous->second.first] = std::move(entry);
    previous->second.second = index;
  }
}

}  // namespace

std::size_t TuningKeyHash::operator()(const TuningKey& key) const {
  std::size_t hash = 0;
  const auto mix = [&hash](std::size_t value) {
    hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  };
  mix(std::hash<std::string>{}(key.device_name));
  mix(std::hash<int>{}(key.cc_major));
  mix(std::hash<int>{}(key.cc_minor));
  mix(std::hash<std::string>{}(key.program_hash));
  mix(std::hash<int>{}(key.codegen_version));
  mix(std::hash<std::string>{}(key.dtype));
  mix(std::hash<std::int64_t>{}(key.n));
  mix(std::hash<std::int64_t>{}(key.m_bucket));
  return hash;
}

std::int64_t m_bucket(std::int64_t rows) {
  if (rows <= 1) return 1;
  if (rows > kMaxMBucket) {
    throw Error("m_bucket: " + std::to_string(rows) + " rows is more than 2^62");
  }
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(rows)));
}

std::string utc_date_time_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void to_json(nlohmann::json& json, const TuningKey& key) {
  json = nlohmann::json{{"device", key.device_name},
                        {"cc", cc_text(key)},
                        {"program_hash", key.program_hash},
                        {"codegen_version", key.codegen_version},
                        {"dtype", key.dtype},
                        {"n", key.n},
                        {"m_bucket", key.m_bucket}};
}

void from_json(const nlohmann::json& json, TuningKey& key) {
  if (!json.is_object()) throw Error("must be an object, got " + describe(json));
  TuningKey parsed;
  parsed.device_name = read_string(json, "device", kMaxDeviceNameLength);
  auto cc = find_required(json, "cc");
  if (!cc->is_string() || !parse_compute_capability(cc->get_ref<const std::string&>(),
                                                    parsed.cc_major, parsed.cc_minor)) {
    field_error("cc", "must be \"major.minor\" like \"9.0\", got " + describe(*cc));
  }
  parsed.program_hash = read_string(json, "program_hash", kMaxProgramHashLength);
  parsed.codegen_version =
      static_cast<int>(read_integer(json, "codegen_version", 0, std::numeric_limits<int>::max()));
  parsed.dtype = read_string(json, "dtype", kMaxDTypeLength);
  parsed.n = read_integer(json, "n", 1, kMaxN);
  parsed.m_bucket = read_integer(json, "m_bucket", 1, kMaxMBucket);
  if (!std::has_single_bit(static_cast<std::uint64_t>(parsed.m_bucket))) {
    field_error("m_bucket", "must be a power of two, got " + std::to_string(parsed.m_bucket));
  }
  key = std::move(parsed);
}

void to_json(nlohmann::json& json, const TuningEntry& entry) {
  to_json(json, entry.key);
  json["config"] = entry.config;
  json["median_us"] = entry.median_us;
  json["tbps"] = entry.tbps;
  json["date"] = entry.date;
}

void from_json(const nlohmann::json& json, TuningEntry& entry) {
  TuningEntry parsed;
  from_json(json, parsed.key);
  auto config = find_required(json, "config");
  if (auto problem = config_problem(*config)) field_error("config", *problem);
  parsed.config = *config;
  parsed.median_us = read_number(json, "median_us", false);
  parsed.tbps = read_number(json, "tbps", true);
  auto date = find_required(json, "date");
  if (!date->is_string() || !is_utc_date_time(date->get_ref<const std::string&>())) {
    field_error("date", "must be an ISO 8601 UTC date-time like \"2024-05-01T12:00:00Z\", got " +
                            describe(*date));
  }
  parsed.date = date->get<std::string>();
  entry = std::move(parsed);
}

std::string_view to_string(TuningLookup::Source source) {
  switch (source) {
    case TuningLookup::Source::exact:
      return "exact";
    case TuningLookup::Source::nearest_m_bucket:
      return "nearest_m_bucket";
    case TuningLookup::Source::heuristic:
      break;
  }
  return "heuristic";
}

std::string TuningFileContents::problem_summary() const {
  std::string summary;
  for (std::size_t i = 0; i < problems.size() && i < kProblemsShown; ++i) {
    if (i > 0) summary += "; ";
    summary += problems[i];
  }
  if (problems.size() > kProblemsShown) {
    summary += "; and " + std::to_string(problems.size() - kProblemsShown) + " more";
  }
  return summary;
}

TuningFileContents parse_tuning_database(std::string_view text) {
  TuningFileContents contents;
  contents.exists = true;
  if (text.size() > kMaxTuningDbBytes) {
    contents.problems.push_back("the text is " + std::to_string(text.size()) +
                                " bytes, more than the " + std::to_string(kMaxTuningDbBytes >> 20) +
                                " MiB limit");
    contents.whole_file_rejected = true;
    return contents;
  }
  parse_document(text, contents);
  return contents;
}

TuningFileContents read_tuning_file(const std::filesystem::path& file) {
  TuningFileContents contents;
  auto text = read_file_text(file, contents);
  if (text && !contents.whole_file_rejected) parse_document(*text, contents);
  return contents;
}

TuningDatabase TuningDatabase::load_file(const std::filesystem::path& file) {
  TuningDatabase database;
  database.source_file_ = file;
  TuningFileContents contents;
  try {
    contents = read_tuning_file(file);
  } catch (const Error& error) {
    warn(std::string(error.what()) + "; ignoring it");
    return database;
  }
  if (contents.whole_file_rejected) {
    warn("ignoring tuning database " + file.string() + ": " + contents.problem_summary());
    return database;
  }
  if (!contents.problems.empty()) {
    warn("tuning database " + file.string() + " has " + std::to_string(contents.problems.size()) +
         " problem(s), using its " + std::to_string(contents.entries.size()) +
         " valid entries: " + contents.problem_summary());
  }
  for (auto& entry : contents.entries) database.insert(std::move(entry));
  return database;
}

void TuningDatabase::insert(TuningEntry entry) {
  TuningKey family = entry.key;
  family.m_bucket = 0;
  auto& indices = buckets_by_family_[family];
  for (std::size_t index : indices) {
    if (entries_[index].key.m_bucket == entry.key.m_bucket) {
      entries_[index] = std::move(entry);
      return;
    }
  }
  indices.push_back(entries_.size());
  entries_.push_back(std::move(entry));
}

const TuningEntry* TuningDatabase::find(const TuningKey& key) const {
  TuningKey family = key;
  family.m_bucket = 0;
  auto indices = buckets_by_family_.find(family);
  if (indices == buckets_by_family_.end()) return nullptr;
  for (std::size_t index : indices->second) {
    if (entries_[index].key.m_bucket == key.m_bucket) return &entries_[index];
  }
  return nullptr;
}

TuningLookup TuningDatabase::lookup(const TuningKey& key) const {
  return lookup_in(std::span<const TuningDatabase>(this, 1), key);
}

TuningLookup TuningDatabase::lookup_in(std::span<const TuningDatabase> layers,
                                       const TuningKey& key) {
  if (key.m_bucket < 1) {
    throw Error("tuning lookup for " + describe_key(key) + ": m_bucket must be at least 1");
  }
  for (const TuningDatabase& layer : layers) {
    if (const TuningEntry* entry = layer.find(key)) {
      return {TuningLookup::Source::exact, *entry, layer.source_file_, layer.origin_};
    }
  }
  TuningKey family = key;
  family.m_bucket = 0;
  const double wanted = std::log2(static_cast<double>(key.m_bucket));
  const TuningEntry* nearest = nullptr;
  const TuningDatabase* nearest_layer = nullptr;
  double nearest_distance = 0;
  for (const TuningDatabase& layer : layers) {
    auto indices = layer.buckets_by_family_.find(family);
    if (indices == layer.buckets_by_family_.end()) continue;
    for (std::size_t index : indices->second) {
      const TuningEntry& candidate = layer.entries_[index];
      const double distance =
          std::abs(std::log2(static_cast<double>(candidate.key.m_bucket)) - wanted);
      // Strict comparisons: an earlier layer keeps its bucket over the same bucket found later.
      const bool better =
          nearest == nullptr || distance < nearest_distance ||
          (distance == nearest_distance && candidate.key.m_bucket > nearest->key.m_bucket);
      if (better) {
        nearest = &candidate;
        nearest_layer = &layer;
        nearest_distance = distance;
      }
    }
  }
  if (nearest) {
    return {TuningLookup::Source::nearest_m_bucket, *nearest, nearest_layer->source_file_,
            nearest_layer->origin_};
  }
  return TuningLookup{};  // the heuristic
}

void TuningDatabaseStack::add_layer(TuningDatabase layer, TuningOrigin origin) {
  layer.origin_ = origin;
  layers_.push_back(std::move(layer));
}

TuningLookup TuningDatabaseStack::lookup(const TuningKey& key) const {
  return TuningDatabase::lookup_in(layers_, key);
}

std::filesystem::path default_tuning_db_path() {
  if (auto path = env_value("TILENORM_TUNING_DB")) return *path;
  return cache_directory() / "tuning.json";
}

std::vector<std::filesystem::path> readonly_tuning_db_paths() {
  std::vector<std::filesystem::path> paths;
  const auto list = env_value("TILENORM_TUNING_DB_READONLY");
  if (!list) return paths;
  std::string_view remaining = *list;
  while (!remaining.empty()) {
    const auto colon = remaining.find(':');
    const auto item = remaining.substr(0, colon);
    if (!item.empty()) paths.emplace_back(item);
    if (colon == std::string_view::npos) break;
    remaining.remove_prefix(colon + 1);
  }
  return paths;
}

std::vector<std::filesystem::path> shipped_tuning_db_paths() {
  std::vector<std::filesystem::path> paths;
  if (env_flag("TILENORM_DISABLE_SHIPPED_DATABASES")) return paths;
  const auto directory = shipped_databases_directory();
  if (!directory) return paths;
  std::error_code error;
  for (auto item = std::filesystem::directory_iterator(*directory, error);
       !error && item != std::filesystem::directory_iterator(); item.increment(error)) {
    if (item->path().extension() == ".json" && item->is_regular_file(error)) {
      paths.push_back(item->path());
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TuningDatabaseStack load_default_tuning_databases() {
  TuningDatabaseStack stack;
  stack.add_layer(TuningDatabase::load_file(default_tuning_db_path()));
  for (const auto& path : readonly_tuning_db_paths()) {
    stack.add_layer(TuningDatabase::load_file(path));
  }
  for (const auto& path : shipped_tuning_db_paths()) {
    stack.add_layer(TuningDatabase::load_file(path), TuningOrigin::shipped);
  }
  return stack;
}

}  // namespace tilenorm
