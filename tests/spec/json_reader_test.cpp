// JsonReader: every error names the file, the JSON pointer and the reason.
#include "sim/spec/json_reader.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace foresight {
namespace {

TEST(JsonReader, MalformedJsonGivesLineAndColumn) {
  auto r = parse_json_text("{\n  \"tp\": 2,\n  \"pp\": }\n", "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message().rfind("plan.json:3:", 0), 0u) << r.error().message();
  EXPECT_NE(r.error().message().find("malformed JSON"), std::string::npos);
}

TEST(JsonReader, ErrorsNameFileAndPointer) {
  const auto doc = nlohmann::json::parse(R"({"node": {"nic": {"bandwidth": "200Gbits"}}, "tp": "eight"})");
  JsonReader r(doc, "cluster.json");
  (void)r.object("node").object("nic").quantity("bandwidth", Dimension::kBandwidth, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message().rfind("cluster.json: /node/nic/bandwidth: ", 0), 0u) << r.error().message();

  JsonReader r2(doc, "plan.json");
  (void)r2.integer("tp", 1);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().message(), "plan.json: /tp: expected an integer, got string \"eight\"");
}

TEST(JsonReader, KeepsTheFirstErrorOnly) {
  const auto doc = nlohmann::json::parse(R"({"a": "x", "b": "y"})");
  JsonReader r(doc, "f.json");
  (void)r.integer("a", 0, 0);
  (void)r.integer("b", 0, 0);
  EXPECT_NE(r.error().message().find("/a:"), std::string::npos);
}

TEST(JsonReader, RejectsUnknownKeysButAllowsDocumentation) {
  const auto doc = nlohmann::json::parse(R"({"tp": 1, "tpp": 2, "sources": {}})");
  JsonReader r(doc, "plan.json");
  r.reject_unknown_keys({"tp", "pp"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("/tpp: unknown field"), std::string::npos);
  const auto ok_doc = nlohmann::json::parse(R"({"tp": 1, "notes": "x", "bandwidth_source": "datasheet"})");
  JsonReader ok(ok_doc, "plan.json");
  ok.reject_unknown_keys({"tp"});
  EXPECT_TRUE(ok.ok()) << ok.error().message();
}

TEST(JsonReader, PointerEscapesSlashAndTilde) {
  EXPECT_EQ(json_pointer_escape("a/b~c"), "a~1b~0c");
}

TEST(JsonReader, RangeAndChoiceErrors) {
  const auto doc = nlohmann::json::parse(R"({"zero_stage": 7, "mlp": "relu6"})");
  JsonReader r(doc, "x.json");
  (void)r.integer("zero_stage", 0, 0, 3);
  EXPECT_NE(r.error().message().find("7 is out of range"), std::string::npos);
  JsonReader r2(doc, "x.json");
  (void)r2.choice("mlp", {"gelu", "swiglu"}, "gelu");
  EXPECT_NE(r2.error().message().find("\"relu6\" is not one of: gelu, swiglu"), std::string::npos);
}

}  // namespace
}  // namespace foresight
