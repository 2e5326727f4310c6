// The bad-input corpus: every file under tests/corpus/ is one hostile or mistaken command line,
// with the exit code and the words of the message it must get. Each runs the real binary with a
// time limit and a memory cap, so a crash, a hang or a runaway allocation fails the case too.
//
// A case file:
//   {"args": ["predict", "--model", "tiny", "--stage-tp", "0,8"],
//    "exit": 2,
//    "message": "stage 0: tp 0 is not a tensor-parallel degree",
//    "files": {"deep.json": ["[", 70000, "]", 70000]}}      (optional)
// In args, @BAD@ is tests/data/bad/, @DATA@ is tests/data/ and @TMP@ a fresh folder holding the
// case's generated files (each the concatenation of its pieces, each piece repeated its count).
// "exit" 2 cases must also print "error: ". "absent": ["@TMP@/out.json"] lists files that must not
// exist afterwards (outputs that failed must leave nothing under their name); "file_size_limit"
// (bytes) stands in for a full disk.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/run_binary.h"

namespace {

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// The issue's bounds: no case may take over 10 s or 2 GiB (sanitized builds run slower and map
// shadow memory, so they get more time and only the resident-memory check).
constexpr double kTimeLimitS = kSanitized ? 60.0 : 10.0;
constexpr long kMaxRssMiB = 2048;

struct Case {
  std::string name;
  nlohmann::json spec;
};

std::vector<Case> load_cases() {
  std::vector<Case> cases;
  const fs::path root = fs::path(FORESIGHT_TEST_DATA).parent_path() / "corpus";
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(root, ec)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    Case c;
    c.name = fs::relative(entry.path(), root).replace_extension().string();
    std::replace_if(
        c.name.begin(), c.name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); },
        '_');
    c.spec = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    cases.push_back(std::move(c));
  }
  std::sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) { return a.name < b.name; });
  return cases;
}

std::string substitute(std::string s, const std::string& tmp) {
  const std::string data = FORESIGHT_TEST_DATA;
  const std::pair<std::string, std::string> subs[] = {
      {"@BAD@", data + "/bad/"}, {"@DATA@", data + "/"}, {"@TMP@", tmp}};
  for (const auto& [from, to] : subs)
    for (std::size_t pos; (pos = s.find(from)) != std::string::npos;) s.replace(pos, from.size(), to);
  return s;
}

using foresight::test::Outcome;

// A full disk is a file-size limit; without sanitizers (whose shadow memory needs the address
// space) a 6 GiB address space is a net for a runaway allocation: the 2 GiB bound is checked on RSS.
Outcome run_binary(const std::vector<std::string>& args, const std::string& out_file,
                   long long file_size_limit) {
  return foresight::test::run_binary(args, out_file,
                                     {kTimeLimitS, "", file_size_limit, kSanitized ? 0 : (6LL << 30)});
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Corpus : public ::testing::TestWithParam<Case> {};

TEST_P(Corpus, ClearErrorNoCrashNoHang) {
  const nlohmann::json& spec = GetParam().spec;
  ASSERT_TRUE(spec.is_object() && spec.contains("args") && spec.contains("exit") && spec.contains("message"))
      << GetParam().name << ": a corpus case needs args, exit and message";
  const fs::path tmp =
      fs::temp_directory_path() / ("foresight-corpus-" + std::to_string(::getpid()) + "-" + GetParam().name);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  if (spec.contains("files")) {
    for (const auto& [name, pieces] : spec["files"].items()) {
      std::ofstream f(tmp / name, std::ios::binary);
      for (std::size_t i = 0; i + 1 < pieces.size(); i += 2) {
        const std::string piece = pieces[i].get<std::string>();
        for (long long k = 0, n = pieces[i + 1].get<long long>(); k < n; ++k) f << piece;
      }
    }
  }
  std::vector<std::string> args;
  for (const auto& a : spec["args"]) args.push_back(substitute(a.get<std::string>(), tmp.string()));
  const Outcome o = run_binary(args, (tmp / ".output").string(), spec.value("file_size_limit", 0LL));
  std::string shown = o.output.size() > 2000 ? o.output.substr(0, 2000) + "..." : o.output;
  EXPECT_FALSE(o.timed_out) << "ran past " << kTimeLimitS << " s\n" << shown;
  EXPECT_LT(o.exit_code, 128) << "killed by signal " << o.exit_code - 128 << "\n" << shown;
  EXPECT_EQ(o.exit_code, spec["exit"].get<int>()) << shown;
  EXPECT_NE(o.output.find(substitute(spec["message"].get<std::string>(), tmp.string())), std::string::npos)
      << shown;
  if (spec["exit"].get<int>() == 2) {
    EXPECT_NE(o.output.find("error: "), std::string::npos) << shown;
  }
  EXPECT_LE(o.max_rss_mib, kMaxRssMiB) << "peak resident memory " << o.max_rss_mib << " MiB";
  EXPECT_LE(o.output.size(), 64u * 1024) << "the output echoes too much: " << o.output.size() << " bytes";
  if (spec.contains("absent")) {
    for (const auto& p : spec["absent"]) {
      EXPECT_FALSE(fs::exists(substitute(p.get<std::string>(), tmp.string()))) << p << " was left behind";
    }
  }
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Cases, Corpus, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& param) { return param.param.name; });

}  // namespace
