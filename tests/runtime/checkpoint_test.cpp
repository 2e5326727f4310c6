// Checkpoints on one rank: a resumed run continues bit-identically, and checkpoint sets (the
// manifest, damaged or missing files, what cannot be resumed, fields of the wrong type).
#include "runtime/training/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/training/hash.h"
#include "tests/runtime/runtime_test_util.h"

namespace foresight::runtime {
namespace {

TEST(Runtime, CheckpointResumeIsBitIdenticalAndCorruptionIsCaught) {
  const auto dir = test_temp_path("foresight-ckpt-test");
  std::filesystem::remove_all(dir);
  auto straight = serial(tiny4(), plan(2));
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(straight->t->step()->loss);

  auto first = serial(tiny4(), plan(2));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->t->step());
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  auto resumed = serial(tiny4(), plan(2));
  ASSERT_TRUE(resumed->t->load_checkpoint(dir.string()));
  EXPECT_EQ(resumed->t->steps_done(), 3);
  EXPECT_EQ(resumed->t->step()->loss, losses[3]);
  EXPECT_EQ(resumed->t->step()->loss, losses[4]);
  EXPECT_EQ(resumed->t->params(), straight->t->params());

  // One flipped byte: the manifest's hash must refuse the file, and with no other set, the load.
  const auto file = dir / "step-00000003" / "rank-00000.ckpt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(200);
    ch ^= 0x10;
    f.write(&ch, 1);
  }
  auto again = serial(tiny4(), plan(2));
  const auto bad = again->t->load_checkpoint(dir.string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("no complete checkpoint set"), std::string::npos)
      << bad.error().message();
  EXPECT_NE(bad.error().message().find("FNV-1a hash"), std::string::npos) << bad.error().message();

  // A checkpoint of another plan is refused by name.
  Plan other = plan(4);
  auto fresh = serial(tiny4(), plan(2));
  ASSERT_TRUE(fresh->t->save_checkpoint(dir.string()));
  auto wrong = serial(tiny4(), other);
  const auto mismatch = wrong->t->load_checkpoint(dir.string());
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message().find("/plan"), std::string::npos) << mismatch.error().message();
  std::filesystem::remove_all(dir);
}

std::string read_bytes(const std::filesystem::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void flip_byte(const std::filesystem::path& f, std::streamoff at) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(at);
  char ch = 0;
  io.read(&ch, 1);
  io.seekp(at);
  ch ^= 0x10;
  io.write(&ch, 1);
}

TEST(CheckpointSet, TheManifestNamesEveryFileAndIsWrittenOnlyAfterThem) {
  const auto dir = test_temp_path("foresight-ckpt-manifest");
  std::filesystem::remove_all(dir);
  auto run = serial(tiny4(), plan(2));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(run->t->step());
  ASSERT_TRUE(run->t->save_checkpoint(dir.string()));
  const auto set2 = dir / "step-00000002";
  const auto m = nlohmann::json::parse(std::ifstream(set2 / "MANIFEST.json"));
  EXPECT_EQ(m["format"], "foresight-checkpoint-set");
  EXPECT_EQ(m["version"], 1);
  EXPECT_EQ(m["step"], 2);
  EXPECT_EQ(m["ranks"], 1);
  EXPECT_EQ(m["model"], run->w.model.name);
  EXPECT_EQ(m["plan"], plan_to_json(run->w.plan));
  ASSERT_EQ(m["files"].size(), 1u);
  const std::string bytes = read_bytes(set2 / "rank-00000.ckpt");
  EXPECT_EQ(m["files"][0]["file"], "rank-00000.ckpt");
  EXPECT_EQ(m["files"][0]["bytes"].get<std::size_t>(), bytes.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(bytes)));
  EXPECT_EQ(m["files"][0]["fnv1a"], hex);
  EXPECT_EQ(bytes, run->t->checkpoint_bytes());  // the file is the state, byte for byte

  // A rank's file that cannot be written (a folder stands where it goes): no manifest for that
  // step, the error names the file, and the previous set stays complete and resumable.
  ASSERT_TRUE(run->t->step());
  const auto set3 = dir / "step-00000003";
  std::filesystem::create_directories(set3 / "rank-00000.ckpt");
  const Status failed = run->t->save_checkpoint(dir.string());
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message().find((set3 / "rank-00000.ckpt").string()), std::string::npos)
      << failed.error().message();
  EXPECT_NE(failed.error().message().find("no manifest was written for step 3"), std::string::npos)
      << failed.error().message();
  EXPECT_FALSE(std::filesystem::exists(set3 / "MANIFEST.json"));
  EXPECT_TRUE(std::filesystem::exists(set2 / "MANIFEST.json"));
  auto resumed = serial(tiny4(), plan(2));
  const auto read = resumed->t->load_checkpoint(dir.string());
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->step, 2);
  EXPECT_EQ(resumed->t->steps_done(), 2);
  ASSERT_EQ(read->skipped.size(), 1u);
  EXPECT_NE(read->skipped[0].find("(step 3): incomplete: no MANIFEST.json"), std::string::npos)
      << read->skipped[0];

  // Once the step's set is complete, the older ones go.
  std::filesystem::remove_all(set3);
  ASSERT_TRUE(run->t->save_checkpoint(dir.string()));
  EXPECT_TRUE(std::filesystem::exists(set3 / "MANIFEST.json"));
  EXPECT_FALSE(std::filesystem::exists(set2));
  std::filesystem::remove_all(dir);
}

TEST(CheckpointSet, ADamagedOrMissingFileFallsBackToThePreviousCompleteSet) {
  const auto dir = test_temp_path("foresight-ckpt-fallback");
  const auto keep = test_temp_path("foresight-ckpt-fallback-step2");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(keep);
  auto straight = serial(tiny4(), plan(2));
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(straight->t->step()->loss);
  // Two complete sets side by side, as a crash between the new manifest and the removal of the
  // old set leaves them: the set of step 2 is copied aside before step 3's replaces it.
  auto first = serial(tiny4(), plan(2));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(first->t->step());
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  std::filesystem::copy(dir / "step-00000002", keep);
  ASSERT_TRUE(first->t->step());
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  const auto file3 = dir / "step-00000003" / "rank-00000.ckpt";
  const std::string good3 = read_bytes(file3);
  struct Damage {
    const char* what;
    std::function<void()> apply;
    const char* reason;
  };
  const std::vector<Damage> damages = {
      {"one flipped byte", [&] { flip_byte(file3, 100); }, "FNV-1a hash"},
      {"a missing file", [&] { std::filesystem::remove(file3); }, "missing (the manifest names it)"},
      {"a truncated file", [&] { std::filesystem::resize_file(file3, good3.size() / 2); },
       "bytes, the manifest says"},
      {"a truncated manifest",
       [&] { std::filesystem::resize_file(dir / "step-00000003" / "MANIFEST.json", 40); }, "not JSON"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    ASSERT_TRUE(first->t->save_checkpoint(dir.string()));  // rewrites step 3 (and removes step 2)
    std::filesystem::copy(keep, dir / "step-00000002");
    std::filesystem::create_directories(
        dir / "step-00000001");  // as a crash mid-removal leaves it: older, not reported
    d.apply();
    auto resumed = serial(tiny4(), plan(2));
    const auto read = resumed->t->load_checkpoint(dir.string());
    ASSERT_TRUE(read) << read.error().message();
    EXPECT_EQ(read->step, 2);
    ASSERT_EQ(read->skipped.size(), 1u);
    EXPECT_NE(read->skipped[0].find("(step 3)"), std::string::npos) << read->skipped[0];
    EXPECT_NE(read->skipped[0].find(d.reason), std::string::npos) << read->skipped[0];
    EXPECT_EQ(resumed->t->step()->loss, losses[2]);  // bit-identical doubles
    EXPECT_EQ(resumed->t->step()->loss, losses[3]);
  }
  // Without the damage, the newest set wins.
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  auto resumed = serial(tiny4(), plan(2));
  const auto read = resumed->t->load_checkpoint(dir.string());
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->step, 3);
  EXPECT_TRUE(read->skipped.empty());
  EXPECT_EQ(resumed->t->step()->loss, losses[3]);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(keep);
}

TEST(CheckpointSet, WhatCannotBeResumedIsAClearError) {
  const auto dir = test_temp_path("foresight-ckpt-errors");
  std::filesystem::remove_all(dir);
  auto run = serial(tiny4(), plan(2));
  const auto message = [&](const std::filesystem::path& d) {
    auto r = serial(tiny4(), plan(2))->t->load_checkpoint(d.string());
    return r ? std::string("loaded step ") + std::to_string(r->step) : r.error().message();
  };
  // No folder; an empty folder; the previous format.
  EXPECT_NE(message(dir).find(dir.string() + ": no such checkpoint folder"), std::string::npos)
      << message(dir);
  std::filesystem::create_directories(dir);
  EXPECT_NE(message(dir).find("no checkpoint set in the folder"), std::string::npos) << message(dir);
  { std::ofstream(dir / "rank-00000.ckpt") << run->t->checkpoint_bytes(); }
  EXPECT_NE(message(dir).find("of the previous format"), std::string::npos) << message(dir);
  std::filesystem::remove(dir / "rank-00000.ckpt");
  // Only an incomplete set: the error names the folder and the set's reason.
  ASSERT_TRUE(run->t->step());
  ASSERT_TRUE(run->t->save_checkpoint(dir.string()));
  const auto manifest = dir / "step-00000001" / "MANIFEST.json";
  const std::string text = read_bytes(manifest);
  std::filesystem::remove(manifest);
  const std::string none = message(dir);
  EXPECT_NE(none.find(dir.string() + ": no complete checkpoint set to resume from"), std::string::npos)
      << none;
  EXPECT_NE(none.find("(step 1): incomplete: no MANIFEST.json"), std::string::npos) << none;
  // A complete set of another rank count, plan or model: an error naming the manifest and field.
  auto edited = [&](const std::string& field, const nlohmann::json& value) {
    auto m = nlohmann::json::parse(text);
    m[field] = value;
    std::ofstream(manifest) << m.dump();
    return message(dir);
  };
  EXPECT_NE(edited("ranks", 2)
                .find(manifest.string() + ": /ranks: the set was written by 2 ranks, this launch has 1"),
            std::string::npos)
      << edited("ranks", 2);
  EXPECT_NE(edited("model", "other").find(manifest.string() + ": /model"), std::string::npos)
      << edited("model", "other");
  EXPECT_NE(edited("plan", plan_to_json(plan(4))).find(manifest.string() + ": /plan"), std::string::npos);
  EXPECT_EQ(edited("step", 1), "loaded step 1");  // the unedited manifest loads (the edits are what fail)
  std::filesystem::remove_all(dir);
}

// Fields of the wrong type in a checkpoint file's header (with a good hash) or in a manifest are
// errors naming the field, not JSON exceptions: a manifest's damaged "format" used to throw out of
// the scan (the resume failed with "[json.exception.type_error.302]" instead of passing the set
// over), and a header's "rank": "0" threw out of restore_checkpoint (exit 3). fuzz_checkpoint.
TEST(CheckpointSet, FieldsOfTheWrongTypeAreErrorsNotExceptions) {
  auto run = serial(tiny4(), plan(2));
  ASSERT_TRUE(run->t->step());
  const std::string good = run->t->checkpoint_bytes();
  auto with_header = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::uint64_t hl = 0;
    std::memcpy(&hl, good.data() + 8, sizeof hl);
    auto header = nlohmann::json::parse(good.substr(16, hl));
    edit(header);
    const std::string h = header.dump();
    std::string blob = good.substr(0, 8);
    const std::uint64_t len = h.size();
    blob.append(reinterpret_cast<const char*>(&len), sizeof len).append(h);
    blob.append(good, 16 + hl, good.size() - 16 - hl - 8);
    const std::uint64_t hash = fnv1a(blob);
    return blob.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  };
  const auto restore = [&](const std::string& blob) {
    const Status s = run->t->restore_checkpoint(blob, "f.ckpt");
    return s ? std::string("ok") : s.error().message();
  };
  EXPECT_EQ(restore(with_header([](nlohmann::json&) {})), "ok");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["rank"] = "0"; })),
            "f.ckpt: /rank: not an integer");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["step"] = 1e300; })),
            "f.ckpt: /step: not an integer");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["step"] = -3; })), "f.ckpt: /step: out of range");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["model"] = 7; })), "f.ckpt: /model: not a string");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["params"] = "many"; })),
            "f.ckpt: /params: not an element count");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["loss_scale"] = 0; })),
            "f.ckpt: /loss_scale: not a positive finite number");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h = nlohmann::json::array({h}); })),
            "f.ckpt: unreadable header");
  // A header length near 2^64 wrapped the bounds check around.
  std::string huge = good.substr(0, good.size() - 8);
  const std::uint64_t wrap = ~std::uint64_t{0} - 7;
  std::memcpy(huge.data() + 8, &wrap, sizeof wrap);
  const std::uint64_t hash = fnv1a(huge);
  huge.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  EXPECT_EQ(restore(huge), "f.ckpt: header length out of range");

  const CheckpointIdentity id = run->t->checkpoint_identity();
  nlohmann::json m = {
      {"format", "foresight-checkpoint-set"},
      {"version", 1},
      {"step", 1},
      {"ranks", 1},
      {"model", id.model},
      {"plan", nlohmann::json::parse(id.plan_json)},
      {"files", {{{"rank", 0}, {"file", "rank-00000.ckpt"}, {"bytes", 10}, {"fnv1a", "0123456789abcdef"}}}}};
  const auto manifest = [&](const nlohmann::json& doc, bool& other) {
    auto r = parse_checkpoint_manifest(doc.dump(), "M", 1, id, other);
    return r ? std::string("ok") : r.error().message();
  };
  bool other = true;
  EXPECT_EQ(manifest(m, other), "ok");
  EXPECT_FALSE(other);
  auto bad = m;
  bad["format"] = 5;
  EXPECT_EQ(manifest(bad, other), "MANIFEST.json: /format: not \"foresight-checkpoint-set\"");
  EXPECT_FALSE(other);  // damaged: the set is passed over
  bad = m;
  bad["files"][0]["rank"] = "0";
  EXPECT_EQ(manifest(bad, other), "MANIFEST.json: /files: 0: /rank is not 0");
  bad = m;
  bad["files"][0]["rank"] = 1e300;
  EXPECT_EQ(manifest(bad, other), "MANIFEST.json: /files: 0: /rank is not 0");
  bad = m;
  bad["model"] = nlohmann::json::array();
  EXPECT_EQ(manifest(bad, other), "M: /model: the set is of model [], this run is " + id.model);
  EXPECT_TRUE(other);  // sound but of another launch: the resume fails
}

}  // namespace
}  // namespace foresight::runtime
