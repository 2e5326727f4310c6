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

TEST(JsonReader, PointerEscapesSlashAndTilde) { EXPECT_EQ(json_pointer_escape("a/b~c"), "a~1b~0c"); }

TEST(JsonReader, RangeAndChoiceErrors) {
  const auto doc = nlohmann::json::parse(R"({"zero_stage": 7, "mlp": "relu6"})");
  JsonReader r(doc, "x.json");
  (void)r.integer("zero_stage", 0, 0, 3);
  EXPECT_NE(r.error().message().find("7 is out of range"), std::string::npos);
  JsonReader r2(doc, "x.json");
  (void)r2.choice("mlp", {"gelu", "swiglu"}, "gelu");
  EXPECT_NE(r2.error().message().find("\"relu6\" is not one of: gelu, swiglu"), std::string::npos);
}

// Deep nesting is refused before anything recursive sees it (a dump of such a value had
// overflowed the stack while the error message was built).
TEST(JsonReader, DeepNestingIsRefusedWithItsPosition) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto r = parse_json_text("{\"tp\":\n " + deep + "}", "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("plan.json:2:257: malformed JSON: nested deeper than 256 levels"),
            std::string::npos)
      << r.error().message();
  // Brackets inside strings do not count; 256 levels still parse.
  EXPECT_TRUE(parse_json_text("{\"s\": \"" + std::string(1000, '[') + "\"}", "s.json").ok());
  EXPECT_TRUE(parse_json_text(std::string(255, '[') + std::string(255, ']'), "ok.json").ok());
}

TEST(JsonReader, FilesAreReadUpToALimit) {
  auto r = read_text_file("/dev/zero", 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("/dev/zero: larger than the 1 MiB"), std::string::npos)
      << r.error().message();
  auto folder = read_json_file("/tmp");
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.error().message().find("/tmp: is a folder, not a file"), std::string::npos);
}

// A value in a message is an excerpt: a long string by its ends and length, a container by its
// size, never the whole value.
TEST(JsonReader, MessagesQuoteOnlyAnExcerpt) {
  nlohmann::json doc = {{"schedule", std::string(1 << 20, 'x')}, {"tp", nlohmann::json::array({1, 2, 3})}};
  JsonReader r(doc, "p.json");
  (void)r.choice("schedule", {"1f1b"}, "1f1b");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.error().message().size(), 200u) << r.error().message().size();
  EXPECT_NE(r.error().message().find("(1048576 bytes) is not one of: 1f1b"), std::string::npos)
      << r.error().message();
  JsonReader r2(doc, "p.json");
  (void)r2.integer("tp", 1);
  EXPECT_NE(r2.error().message().find("/tp: expected an integer, got array of 3 elements"), std::string::npos)
      << r2.error().message();
}

// Written-out rates of zero and quantities outside any machine's range are errors, not defaults.
TEST(JsonReader, QuantitiesMustBePhysical) {
  const auto doc =
      nlohmann::json::parse(R"({"nic": "1e-300Gbps", "peak": "0TFLOPS", "latency": "0us", "mem": "2e30B"})");
  JsonReader r(doc, "c.json");
  (void)r.quantity("nic", Dimension::kBandwidth, 1.0);
  EXPECT_NE(r.error().message().find("c.json: /nic: \"1e-300Gbps\" is outside the range of a bandwidth"),
            std::string::npos)
      << r.error().message();
  JsonReader r2(doc, "c.json");
  (void)r2.quantity("peak", Dimension::kFlopRate, 1.0);
  EXPECT_NE(r2.error().message().find("/peak: \"0TFLOPS\" is a rate of zero"), std::string::npos)
      << r2.error().message();
  JsonReader r3(doc, "c.json");
  EXPECT_EQ(r3.quantity("latency", Dimension::kSeconds, 1.0), 0.0);  // a zero latency is physical
  EXPECT_TRUE(r3.ok());
  (void)r3.quantity("mem", Dimension::kBytes, 1.0);
  EXPECT_NE(r3.error().message().find("is outside the range of a size"), std::string::npos)
      << r3.error().message();
}

TEST(JsonReader, NullFieldsCanBeRefused) {
  const auto doc = nlohmann::json::parse(R"({"tp": null, "source": null})");
  JsonReader lenient(doc, "plan.json");
  EXPECT_EQ(lenient.integer("tp", 4), 4);  // null is "not given" where a file marks figures unreported
  JsonReader strict(doc, "plan.json");
  strict.reject_null_fields();
  EXPECT_NE(strict.error().message().find("plan.json: /tp: null is not a value here"), std::string::npos);
}

}  // namespace
}  // namespace foresight
