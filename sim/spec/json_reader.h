// Reads typed fields out of a JSON document and records the first problem with the file name and
// the JSON pointer of the field, so that every spec error reads like
//   plan.json: /tp: expected a positive integer, got "eight"
//
//   JsonReader r(doc, "plan.json");
//   plan.tp = r.integer("tp", 1);            // optional, default 1
//   plan.global_batch = r.required_integer("global_batch");
//   if (!r.ok()) return r.error();
//
// After the first error the reader keeps returning defaults, so parsing code stays linear.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/status.h"
#include "sim/core/units.h"

namespace foresight {

// Limits every JSON input shares (plans, clusters, models, sweep specs, validation cases): larger
// or deeper documents are refused with the file's name before they are parsed.
inline constexpr std::size_t kMaxJsonBytes = std::size_t{64} << 20;
inline constexpr int kMaxJsonDepth = 256;

// Reads a whole file of at most `max_bytes` (a device such as /dev/zero stops at the limit).
Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes);
// Parses text as JSON (at most `max_bytes`, at most kMaxJsonDepth levels); the error names the
// file, line and column.
Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& file,
                                       std::size_t max_bytes = kMaxJsonBytes);
// A JSON value for an error message, never dumped whole: "array of 3 elements", "string \"ab...\""
// (an excerpt), "number 7".
std::string describe_json_value(const nlohmann::json& v);
// Reads and parses a file.
Result<nlohmann::json> read_json_file(const std::string& path);
// Escapes a key for use in a JSON pointer (RFC 6901: ~ -> ~0, / -> ~1).
std::string json_pointer_escape(std::string_view key);

class JsonReader {
 public:
  JsonReader(const nlohmann::json& doc, std::string file, std::string pointer = "");

  bool ok() const { return sink_->error.empty(); }
  Error error() const { return Error(sink_->error); }
  const std::string& file() const { return sink_->file; }
  const std::string& pointer() const { return pointer_; }
  const nlohmann::json& node() const { return *node_; }

  bool has(std::string_view key) const;
  // Records an error about this object's field `key` (or the object itself when key is empty).
  void fail(std::string_view key, const std::string& reason);
  // Records an error unless every key of the object is in `known` or is documentation
  // ("source", "sources", "notes", "description", "$schema", "*_source", "_*").
  void reject_unknown_keys(std::initializer_list<std::string_view> known);
  void reject_unknown_keys(std::span<const std::string_view> known);
  // Records an error for a field whose value is null (readers otherwise take null as absent, the
  // convention of files that mark figures as unreported): `"tp": null` is refused, not defaulted.
  void reject_null_fields();

  std::string string(std::string_view key, std::string fallback = "");
  std::string required_string(std::string_view key);
  // A string that must be one of `choices`; the error lists them.
  std::string choice(std::string_view key, std::initializer_list<std::string_view> choices,
                     std::string fallback);
  std::int64_t integer(std::string_view key, std::int64_t fallback, std::int64_t min = 1,
                       std::int64_t max = INT64_MAX);
  std::int64_t required_integer(std::string_view key, std::int64_t min = 1, std::int64_t max = INT64_MAX);
  std::optional<std::int64_t> optional_integer(std::string_view key, std::int64_t min = 1,
                                               std::int64_t max = INT64_MAX);
  double number(std::string_view key, double fallback, double min, double max);
  std::optional<double> optional_number(std::string_view key, double min, double max);
  bool boolean(std::string_view key, bool fallback);
  std::optional<bool> optional_boolean(std::string_view key);
  // A quantity with its unit inside the string ("400Gbps"); SI base units out.
  double quantity(std::string_view key, Dimension dim, double fallback);
  double required_quantity(std::string_view key, Dimension dim);

  // A nested object; an absent key gives an empty object, a non-object records an error.
  JsonReader object(std::string_view key);
  // Elements of an array (absent: none); each reader points at "/key/i".
  std::vector<JsonReader> array(std::string_view key);
  // Members of an object, as (key, reader) pairs.
  std::vector<std::pair<std::string, JsonReader>> members(std::string_view key);

 private:
  struct Sink {
    std::string file;
    std::string error;
    std::vector<std::unique_ptr<nlohmann::json>> owned;  // keeps empty objects alive
  };
  JsonReader(std::shared_ptr<Sink> sink, const nlohmann::json* node, std::string pointer);
  const nlohmann::json* find(std::string_view key) const;
  std::string path(std::string_view key) const;

  std::shared_ptr<Sink> sink_;
  const nlohmann::json* node_;
  std::string pointer_;
};

}  // namespace foresight
