// JsonReader: typed field access with file + JSON pointer in every error.
#include "sim/spec/json_reader.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace foresight {

using nlohmann::json;

namespace {

// A value for an error message, never dumped whole: containers by their size (dumping a deeply
// nested one would recurse once per level), strings as a short excerpt.
std::string describe(const json& v) {
  if (v.is_array()) return "array of " + std::to_string(v.size()) + " elements";
  if (v.is_object()) return "object of " + std::to_string(v.size()) + " fields";
  if (v.is_string()) return "string " + quote_excerpt(v.get_ref<const std::string&>(), 37);
  return std::string(v.type_name()) + " " + v.dump();
}

// The deepest nesting of arrays and objects in `text`, counted without recursion (strings are
// skipped), so that a '[' * 100000 document is refused before any recursive code sees it.
// Returns the byte offset where `limit` was passed, or npos.
std::size_t nesting_beyond(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::string line_and_column(std::string_view text, std::size_t offset) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < std::min(offset, text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

bool is_doc_key(std::string_view k) {
  return k == "source" || k == "sources" || k == "notes" || k == "description" || k == "$schema" ||
         k == "schema" || (!k.empty() && k.front() == '_') ||
         (k.size() > 7 && k.substr(k.size() - 7) == "_source");
}

}  // namespace

Result<json> parse_json_text(std::string_view text, const std::string& file, std::size_t max_bytes) {
  if (text.size() > max_bytes)
    return Error(file + ": " + std::to_string(text.size()) + " bytes is larger than the " +
                 std::to_string(max_bytes >> 20) + " MiB this input may have");
  if (const std::size_t at = nesting_beyond(text, kMaxJsonDepth); at != std::string_view::npos)
    return Error(file + ":" + line_and_column(text, at) + ": malformed JSON: nested deeper than " +
                 std::to_string(kMaxJsonDepth) + " levels");
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded()) return doc;
  // Parse again with exceptions only to recover the position for the message.
  try {
    [[maybe_unused]] auto ignored = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const auto pos = what.find("syntax error");
    if (pos != std::string::npos) what = what.substr(pos);
    // The parser quotes the last token read, which may be a 100 MB string: keep a short excerpt.
    if (what.size() > 200) what = what.substr(0, 120) + "..." + what.substr(what.size() - 60);
    return Error(file + ":" + line_and_column(text, e.byte == 0 ? 0 : e.byte - 1) +
                 ": malformed JSON: " + what);
  } catch (const std::exception& e) {
    return Error(file + ": malformed JSON: " + e.what());
  }
  return Error(file + ": malformed JSON");
}

Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Error(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) return Error(path + ": is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(path + ": cannot open file");
  // Read at most one byte past the limit, so that /dev/zero or a runaway file stops there.
  std::string text;
  std::array<char, 1 << 16> buf{};
  while (in && text.size() <= max_bytes) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min(buf.size(), max_bytes + 1 - text.size())));
    text.append(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) return Error(path + ": read error");
  if (text.size() > max_bytes)
    return Error(path + ": larger than the " + std::to_string(max_bytes >> 20) + " MiB this input may have");
  return text;
}

Result<json> read_json_file(const std::string& path) {
  FS_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxJsonBytes));
  return parse_json_text(text, path);
}

std::string describe_json_value(const json& v) { return describe(v); }

std::string json_pointer_escape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

JsonReader::JsonReader(const json& doc, std::string file, std::string pointer)
    : sink_(std::make_shared<Sink>()), node_(&doc), pointer_(std::move(pointer)) {
  sink_->file = std::move(file);
}

JsonReader::JsonReader(std::shared_ptr<Sink> sink, const json* node, std::string pointer)
    : sink_(std::move(sink)), node_(node), pointer_(std::move(pointer)) {}

std::string JsonReader::path(std::string_view key) const {
  if (key.empty()) return pointer_.empty() ? "/" : pointer_;
  return pointer_ + "/" + json_pointer_escape(key);
}

void JsonReader::fail(std::string_view key, const std::string& reason) {
  if (!sink_->error.empty()) return;
  sink_->error = sink_->file + ": " + path(key) + ": " + reason;
}

const json* JsonReader::find(std::string_view key) const {
  if (!node_->is_object()) return nullptr;
  auto it = node_->find(std::string(key));
  if (it == node_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonReader::has(std::string_view key) const { return find(key) != nullptr; }

void JsonReader::reject_unknown_keys(std::initializer_list<std::string_view> known) {
  reject_unknown_keys(std::span<const std::string_view>(known.begin(), known.size()));
}

void JsonReader::reject_unknown_keys(std::span<const std::string_view> known) {
  if (!node_->is_object()) {
    fail("", "expected an object, got " + describe(*node_));
    return;
  }
  for (const auto& [k, v] : node_->items()) {
    bool found = is_doc_key(k);
    for (auto kk : known) found = found || kk == k;
    if (!found) {
      std::string list;
      for (auto kk : known) list += (list.empty() ? "" : ", ") + std::string(kk);
      fail(k, "unknown field (known fields: " + list + ")");
      return;
    }
  }
}

void JsonReader::reject_null_fields() {
  if (!node_->is_object()) return;
  for (const auto& [k, v] : node_->items())
    if (v.is_null() && !is_doc_key(k)) {
      fail(k, "null is not a value here (leave the field out to take its default)");
      return;
    }
}

std::string JsonReader::string(std::string_view key, std::string fallback) {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) {
    fail(key, "expected a string, got " + describe(*v));
    return fallback;
  }
  return v->get<std::string>();
}

std::string JsonReader::required_string(std::string_view key) {
  if (!find(key)) {
    fail(key, "missing required field");
    return "";
  }
  return string(key);
}

std::string JsonReader::choice(std::string_view key, std::initializer_list<std::string_view> choices,
                               std::string fallback) {
  if (!find(key)) return fallback;
  std::string v = string(key, fallback);
  for (auto c : choices)
    if (c == v) return v;
  std::string list;
  for (auto c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  fail(key, quote_excerpt(v) + " is not one of: " + list);
  return fallback;
}

std::optional<std::int64_t> JsonReader::optional_integer(std::string_view key, std::int64_t min,
                                                         std::int64_t max) {
  const json* v = find(key);
  if (!v) return std::nullopt;
  std::int64_t out = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(key, "integer " + v->dump() + " is out of range");
      return std::nullopt;
    }
    out = v->get<std::int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::floor(v->get<double>()) == v->get<double>() && std::fabs(v->get<double>()) < 9e15) {
    out = static_cast<std::int64_t>(v->get<double>());
  } else {
    fail(key, "expected an integer, got " + describe(*v));
    return std::nullopt;
  }
  if (out < min || out > max) {
    std::string range = max == INT64_MAX ? ">= " + std::to_string(min)
                                         : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    fail(key, std::to_string(out) + " is out of range; expected an integer " + range);
    return std::nullopt;
  }
  return out;
}

std::int64_t JsonReader::integer(std::string_view key, std::int64_t fallback, std::int64_t min,
                                 std::int64_t max) {
  return optional_integer(key, min, max).value_or(fallback);
}

std::int64_t JsonReader::required_integer(std::string_view key, std::int64_t min, std::int64_t max) {
  if (!find(key)) {
    fail(key, "missing required field");
    return min;
  }
  return optional_integer(key, min, max).value_or(min);
}

std::optional<double> JsonReader::optional_number(std::string_view key, double min, double max) {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    fail(key, "expected a number, got " + describe(*v));
    return std::nullopt;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::ostringstream os;
    os << d << " is out of range; expected a number in [" << min << ", " << max << "]";
    fail(key, os.str());
    return std::nullopt;
  }
  return d;
}

double JsonReader::number(std::string_view key, double fallback, double min, double max) {
  return optional_number(key, min, max).value_or(fallback);
}

std::optional<bool> JsonReader::optional_boolean(std::string_view key) {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    fail(key, "expected true or false, got " + describe(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

bool JsonReader::boolean(std::string_view key, bool fallback) {
  return optional_boolean(key).value_or(fallback);
}

double JsonReader::quantity(std::string_view key, Dimension dim, double fallback) {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) {
    fail(key, "expected " + std::string(dimension_name(dim)) + " with its unit as a string, e.g. " +
                  std::string(dimension_examples(dim)) + "; got " + describe(*v));
    return fallback;
  }
  auto q = parse_quantity(v->get<std::string>(), dim);
  if (!q) {
    fail(key, q.error().message());
    return fallback;
  }
  // No link or device runs at a rate of zero: written out, it is a mistake (leaving the field out
  // keeps its documented default), not a request for the default.
  if (q.value() == 0 && (dim == Dimension::kBandwidth || dim == Dimension::kFlopRate)) {
    fail(key, quote_excerpt(v->get_ref<const std::string&>()) +
                  " is a rate of zero: a rate must be positive (leave the field out to take its default)");
    return fallback;
  }
  if (Status in_range = check_physical_range(q.value(), dim, v->get_ref<const std::string&>()); !in_range) {
    fail(key, in_range.error().message());
    return fallback;
  }
  return q.value();
}

double JsonReader::required_quantity(std::string_view key, Dimension dim) {
  if (!find(key)) {
    fail(key, "missing required field (" + std::string(dimension_name(dim)) + ", e.g. " +
                  std::string(dimension_examples(dim)) + ")");
    return 0.0;
  }
  return quantity(key, dim, 0.0);
}

JsonReader JsonReader::object(std::string_view key) {
  const json* v = find(key);
  if (v && v->is_object()) return JsonReader(sink_, v, path(key));
  if (v) fail(key, "expected an object, got " + describe(*v));
  sink_->owned.push_back(std::make_unique<json>(json::object()));
  return JsonReader(sink_, sink_->owned.back().get(), path(key));
}

std::vector<JsonReader> JsonReader::array(std::string_view key) {
  std::vector<JsonReader> out;
  const json* v = find(key);
  if (!v) return out;
  if (!v->is_array()) {
    fail(key, "expected an array, got " + describe(*v));
    return out;
  }
  for (std::size_t i = 0; i < v->size(); ++i)
    out.push_back(JsonReader(sink_, &(*v)[i], path(key) + "/" + std::to_string(i)));
  return out;
}

std::vector<std::pair<std::string, JsonReader>> JsonReader::members(std::string_view key) {
  std::vector<std::pair<std::string, JsonReader>> out;
  const json* v = find(key);
  if (!v) return out;
  if (!v->is_object()) {
    fail(key, "expected an object, got " + describe(*v));
    return out;
  }
  for (const auto& [k, val] : v->items())
    out.emplace_back(k, JsonReader(sink_, &val, path(key) + "/" + json_pointer_escape(k)));
  return out;
}

}  // namespace foresight
